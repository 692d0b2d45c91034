"""Batch image generation and save-by-prompt comparison grids.

    python -m trainers generate --config gen.toml [--run-dir DIR] [--model …] [--prompt …] [--lora PATH:WEIGHT]
    python -m trainers compare --compare-run runs/<training run> --prompt "a dog" --seed 42

A job follows the training contract: a job directory with config.toml, events.jsonl, status.json and
images/. One worker (a full pipeline) per GPU takes work items from a shared queue; each image's
seed depends only on its prompt and index, so the pictures do not depend on the number of workers.

Modules: `options` (the schema, torch-free), `plan` (work items, seeds, file names; torch-free),
`saves` (a training run's saves and prompts; torch-free),
`renderer` (pipeline, LoRAs, prompt-embedding cache), `job` (the queue and the workers),
`grid` (the labelled compare grid), `cli`.
"""
