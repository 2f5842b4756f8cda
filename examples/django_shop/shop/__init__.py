"""The shop app: orders and the task that charges them."""
