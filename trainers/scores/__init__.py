"""Scores per save: prompt fidelity and likeness of each save's sample images, the best save picked (docs/scores.md)."""
