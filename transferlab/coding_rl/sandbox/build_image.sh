#!/usr/bin/env bash
# Build the Docker sandbox image from Debian packages (no container registry needed).
# Usage: build_image.sh IMAGE_NAME [MIRROR]
set -euo pipefail
image="${1:?usage: build_image.sh IMAGE_NAME [MIRROR]}"
mirror="${2:-}"
if [ -z "$mirror" ]; then
  # the mirror apt is configured with
  mirror=$(grep -hoE '^(URIs:|deb) +[a-z]+://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
           | awk '{print $2}' | grep -v security | head -n1 || true)
  mirror="${mirror:-http://deb.debian.org/debian}"
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 2; }
root=$(mktemp -d /tmp/transferlab-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "debootstrap bookworm from $mirror into $root ..." >&2
debootstrap --variant=minbase --include=python3 bookworm "$root" "$mirror" >&2
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$image" >/dev/null
echo "built $image" >&2
