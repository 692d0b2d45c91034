"""LoRA files as Generate and the tools read them: a file's modules and their network types (`lora_state`), the
family it is for (`lora_family`), the model's layers under kohya's names (`layers`, `lycoris_files`) and whether
its modules fit them in shape (`lora_fit`). Below both generate/ and tools/, which use it."""
