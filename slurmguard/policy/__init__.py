"""Fleet policy: pure functions from what the store knows to what serve should do."""
