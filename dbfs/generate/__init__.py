"""Graph generators: pure, block-seeded functions of (spec, start, stop)."""
