"""GST+EFD: graph segment training of cost models on large graphs."""
