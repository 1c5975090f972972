"""One module per producer/layout: recognise a dump root, parse its files into catalog rows.

`registry` lists them (and finds the plug-ins of other distributions); `sink` is what a reader
may ask of the pipeline; `base` is what a reader is."""
