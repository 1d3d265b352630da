"""The ranges protobuf's well-known types define (google/protobuf/timestamp.proto and
duration.proto), which both servers check before converting a request's values: the conversion
itself refuses an out-of-range value with an error that names no field."""

# Timestamp: 0001-01-01T00:00:00Z up to 9999-12-31T23:59:59.999999999Z.
TIMESTAMP_SECONDS_MIN = -62_135_596_800
TIMESTAMP_SECONDS_MAX = 253_402_300_799
# Duration: ±10,000 years.
DURATION_SECONDS_MAX = 315_576_000_000
# Both: nanos, a non-negative fraction of a second.
NANOS_MAX = 999_999_999
