"""Small utilities every layer may use: errors, immutable records, atomic writes, environment switches."""
