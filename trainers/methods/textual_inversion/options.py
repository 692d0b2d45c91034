"""Textual inversion's own options (torch-free): the new word, what it starts from, how many vectors it has.
Names and meanings as sd-scripts' train_textual_inversion.py."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import only

TEXTUAL_INVERSION = only("textual_inversion")
WITH_LORA = only("textual_inversion", "lora")  # a LoRA learns a new word alongside (pivotal tuning)
GROUPS = {"embedding": "New word (embedding)"}
OPEN_GROUPS = ("embedding",)  # the tab is about the word: its section opens (on the LoRA tab it stays folded)
SD_SCRIPTS: dict[str, str] = {"sd1": "train_textual_inversion.py", "sd2": "train_textual_inversion.py",
                              "sdxl": "sdxl_train_textual_inversion.py"}
# that script reads them by these names
SD_SCRIPTS_OPTIONS = ("token_string", "init_word", "num_vectors_per_token", "use_object_template",
                      "use_style_template", "weights")
MAX_VECTORS = 75  # one chunk of a CLIP prompt


def _embedding(name: str, kind: str, default: object, help: str, methods: frozenset[str] = WITH_LORA,
               **kw: object) -> Option:
    return Option(name, kind, default, help, "embedding", methods=methods, **kw)  # type: ignore[arg-type]


OPTIONS: tuple[Option, ...] = (
    _embedding("token_string", "str", "", "The new word the embedding is learned for, as your captions and prompts "
               "write it (e.g. 'mychar'): one lowercase word the tokenizer does not know yet. Captions without it "
               "teach it nothing. LoRA: a word learned together with the LoRA (pivotal tuning), saved inside the "
               "LoRA file and as its own embedding; empty: none."),
    _embedding("init_word", "str", "", "The word(s) the new vectors start from, e.g. 'woman' (their tokens are "
               "repeated or cut to num_vectors_per_token); empty: the text encoder's usual init of new tokens."),
    _embedding("num_vectors_per_token", "int", 1, "How many vectors (tokens) the new word stands for: more learn "
               "more, and take that many of a prompt's 75 tokens. Written as <token_string>, <token_string>1, ... "
               "inside the text encoder.", min=1, max=MAX_VECTORS),
    _embedding("weights", "str", "", "An embedding file to start from instead of init_word (sd-scripts' --weights): "
               "one this program, sd-scripts, A1111 (.pt or .safetensors) or diffusers (learned_embeds) saved for a "
               "model of the same kind (SDXL: both clip_l and clip_g); it must hold num_vectors_per_token vectors. "
               "Empty: a new embedding.", methods=TEXTUAL_INVERSION, path="file"),
    _embedding("use_object_template", "bool", False, "Train on fixed sentences about an object ('a photo of a "
               "<token_string>', 'a close-up photo of the <token_string>', ...) instead of the captions, as "
               "sd-scripts' use_object_template: for a subject when the images have no captions.",
               methods=TEXTUAL_INVERSION),
    _embedding("use_style_template", "bool", False, "Train on fixed sentences about a style ('a painting in the style "
               "of <token_string>', ...) instead of the captions, as sd-scripts' use_style_template.",
               methods=TEXTUAL_INVERSION),
    _embedding("embedding_lr", "float", None, "Pivotal tuning: learning rate of the new word's vectors (unset: "
               "text_encoder_lr, else learning_rate). Embeddings usually want a higher rate than the LoRA (e.g. "
               "1e-3 beside 1e-4).", methods=only("lora"), min=0, nullable=True, advanced=True),
)
