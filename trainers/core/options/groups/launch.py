"""Options: Flags of `accelerate launch` (processes, machines, DeepSpeed/FSDP), not read by the trainer itself."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("num_processes", "int", 1, "Processes (GPUs) to train on. Each trains a share of every epoch.",
           "launch", min=1, max=64),
    Option("gpu_ids", "str", "", "GPUs to use, e.g. '0,1' (empty: the first num_processes GPUs).", "launch"),
    Option("num_machines", "int", 1, "Machines taking part in the run.", "launch", min=1, max=64, advanced=True),
    Option("machine_rank", "int", 0, "This machine's rank (0 on the main machine).", "launch", min=0, max=63,
           advanced=True),
    Option("main_process_ip", "str", "", "Address of the main machine (several machines only).", "launch",
           advanced=True),
    Option("main_process_port", "int", 29500, "Port of the main process for process communication.", "launch",
           min=1, max=65535, advanced=True),
    Option("distributed_backend", "str", "ddp", "How several processes share the work: 'ddp' copies the model to "
           "every GPU (best for LoRAs and models that fit); 'deepspeed' (ZeRO) shards optimizer states and gradients "
           "(full finetunes that do not fit); 'fsdp' shards the weights too (full finetunes, and LoRAs of base "
           "models too big for one GPU). DeepSpeed and FSDP go through a per-run accelerate config (accelerate.yaml).",
           "launch", choices=("ddp", "deepspeed", "fsdp"), advanced=True),
    Option("zero_stage", "int", 2, "DeepSpeed ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also the "
           "weights (gathered whole for every save).", "launch", min=1, max=3, advanced=True),
    Option("fsdp_version", "int", 2, "FSDP: 2 is torch's fully_shard (each weight sharded on its own; also runs on "
           "CPU processes over gloo); 1 the older flat-parameter FSDP (NVIDIA GPUs only).", "launch", min=1, max=2,
           advanced=True),
    Option("fsdp_state_dict_type", "str", "SHARDED_STATE_DICT", "FSDP2: how training states (save_state, Stop, "
           "resume) are written. 'SHARDED_STATE_DICT': each process writes its own shard (torch.distributed.checkpoint),"
           " so no process ever holds the whole optimizer state; resumes on any number of processes (shards are "
           "re-cut). 'FULL_STATE_DICT': the shards are gathered onto the main process's CPU and written as one state "
           "(needs RAM for all weights and optimizer states there). Model saves are always whole.", "launch",
           choices=("SHARDED_STATE_DICT", "FULL_STATE_DICT"), advanced=True),
    Option("offload_optimizer", "bool", False, "DeepSpeed: keep optimizer states in CPU memory and step them on the "
           "CPU (ZeRO-Offload; much less GPU memory, slower steps; needs optimizer_type = 'AdamW').", "launch",
           advanced=True),
    Option("ddp_gradient_precision", "str", "fp32", "DDP: precision of the gradients exchanged between processes each "
           "step. 'bf16' halves the traffic (the update itself stays in full precision); helps most across machines "
           "or GPUs without NVLink.", "launch", choices=("fp32", "bf16", "fp16"), advanced=True),
    Option("ddp_timeout", "int", 180, "Minutes a process waits for the others at a synchronisation point before the "
           "run fails. Long enough for uneven work such as caching latents, generating class images or saving a large "
           "model on a slow disk; a process that crashes stops the run at once regardless.", "launch", min=1,
           max=10080, advanced=True),
    Option("num_cpu_threads_per_process", "int", None, "CPU threads of each process (accelerate's flag). Unset: on "
           "a machine without GPUs, its cores shared among the processes (accelerate alone would give a single-process "
           "CPU run one thread); with GPUs, accelerate's default.", "launch", min=1, max=1024, nullable=True,
           advanced=True),
    Option("dynamo_backend", "str", "no", "torch.compile backend ('no' to skip compiling).", "launch",
           choices=("no", "inductor", "eager", "aot_eager"), advanced=True),
)
