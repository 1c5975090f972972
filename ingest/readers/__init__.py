"""One module per producer/layout: recognise a dump root, parse its files into catalog rows."""
