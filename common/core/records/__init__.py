"""What a run writes: the metrics records, their JSON codec and schema, the writer and scanner, the
console line, provenance."""
