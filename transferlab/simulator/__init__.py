"""Ground-truth ecommerce world, historical logs and the simulator learned from them."""
