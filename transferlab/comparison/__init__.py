"""Experiments on top of both domains: the coding-vs-ecommerce comparison and the transfer experiment."""
