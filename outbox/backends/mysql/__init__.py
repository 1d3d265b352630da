"""The MySQL/MariaDB outbox (``mysql+pymysql://``): several sidecars share it, in one table."""
