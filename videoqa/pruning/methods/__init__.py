"""The built-in pruning methods, one declaration each (the algorithms live in videoqa/pruning/)."""
