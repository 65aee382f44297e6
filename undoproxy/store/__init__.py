"""The SQLite journal: schema and migrations (`schema`), the one write path (`writer`),
the records (`records`) and the reads (`queries`)."""
