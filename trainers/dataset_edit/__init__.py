"""Preparing a dataset by hand: open it, edit captions one by one or in bulk (previewed, undoable), read its
statistics, arrange its concept folders. Torch-free: the GUI's Dataset tab calls it on its request path."""
