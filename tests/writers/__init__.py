"""Writers of dump trees for producers that cannot run here, strictly from the reference."""
