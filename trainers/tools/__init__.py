"""LoRA and model tools: `python -m trainers tools <verb>` and the Tools tab (gui/tools_tab.py).

inspect, resize, merge, extract and convert, one module each (torch only inside them); their options are declared
once in options.py (torch-free), and each runs as a job in a folder of its own (job.py, events.py) as generation
jobs do. See docs/tools.md.
"""
