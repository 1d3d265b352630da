"""The bundled RocketMQ-style broker."""
