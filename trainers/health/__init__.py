"""The health check of a save: its weights, whether other programs load it, and its effect on an image."""
