"""Wan 2.2 A14B: the two-expert pair (high-noise `transformer`, low-noise `transformer_2`, switched at a timestep
boundary), trained as musubi-tuner's --timestep_boundary does."""
