"""Tiny random-init (or hand-set) models of the captioners' and maskers' real classes, built offline in code: the
tests, the benchmark (benchmarks/caption_benchmark.py) and a try-out without downloads use them.

The tagger is a real WD14-shaped ONNX file (NHWC BGR 0-255 input, one probability per tag) whose tags follow the
image's colour, with a selected_tags.csv in the format the WD14 taggers ship.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

TAGGER_SIZE = 32
# (name, category, channel of the BGR mean it follows or -1 for never, sign): a red image is "red_background"
TINY_TAGS = (("general", 9, 1, 1.0), ("sensitive", 9, 1, -1.0), ("red_background", 0, 2, 1.0),
             ("blue_sky", 0, 0, 1.0), ("green_theme", 0, 1, 1.0), ("^_^", 0, 2, 1.0), ("no_humans", 0, -1, 1.0),
             ("hatsune_miku", 4, 1, 1.0))


def build_tiny_tagger(folder: Path) -> Path:
    """model.onnx + selected_tags.csv: probability = sigmoid(10 * (channel mean / 255 - 0.5)) per tag."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    weights = np.zeros((3, len(TINY_TAGS)), dtype=np.float32)
    bias = np.full(len(TINY_TAGS), -5.0, dtype=np.float32)
    for i, (_, _, channel, sign) in enumerate(TINY_TAGS):
        if channel < 0:
            bias[i] = -20.0
        else:
            weights[channel, i] = sign * 10.0 / 255.0
            bias[i] = -5.0 * sign
    nodes = [helper.make_node("ReduceMean", ["input_1", "axes"], ["mean"], keepdims=0),
             helper.make_node("MatMul", ["mean", "w"], ["logits"]),
             helper.make_node("Add", ["logits", "b"], ["scores"]),
             helper.make_node("Sigmoid", ["scores"], ["predictions_sigmoid"])]
    graph = helper.make_graph(
        nodes, "tiny_wd14_tagger",
        [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, ["batch", TAGGER_SIZE, TAGGER_SIZE, 3])],
        [helper.make_tensor_value_info("predictions_sigmoid", TensorProto.FLOAT, ["batch", len(TINY_TAGS)])],
        [numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"), numpy_helper.from_array(weights, "w"),
         numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, folder / "model.onnx")
    with open(folder / "selected_tags.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["tag_id", "name", "category", "count"])
        for i, (name, category, _, _) in enumerate(TINY_TAGS):
            out.writerow([1000 + i, name, category, 100 - i])
    return folder


# ---- transformers captioners: tiny configs of the real classes, random weights -------------------------------

WORDS = ("a", "photo", "of", "red", "blue", "green", "cat", "dog", "the", "with", "and", "on")
IMAGE_SIZE = 32


def _byte_symbols() -> list[str]:
    """The 256 printable stand-ins of bytes that byte-level BPE vocabularies (GPT-2, BART) use."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def build_tiny_blip(folder: Path) -> Path:
    """BlipForConditionalGeneration + BlipProcessor (a BERT word-piece vocabulary of a few words)."""
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"), bos_token="[DEC]")
    processor = BlipProcessor(BlipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}), tokenizer)
    tiny = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 37}
    config = BlipConfig(text_config={**tiny, "vocab_size": len(vocab), "max_position_embeddings": 64,
                                     "bos_token_id": vocab.index("[DEC]"), "pad_token_id": 0, "sep_token_id": 3,
                                     "eos_token_id": 3},
                        vision_config={**tiny, "image_size": IMAGE_SIZE, "patch_size": 8}, projection_dim=32)
    torch.manual_seed(0)
    BlipForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def build_tiny_florence2(folder: Path) -> Path:
    """Florence2ForConditionalGeneration (a 2-stage DaViT and a 1-layer BART) + Florence2Processor (a byte-level BART
    tokenizer without merges). The end token's embedding is zero, so the random model writes text until
    max_new_tokens instead of stopping at once."""
    import torch
    from transformers import (BartTokenizer, CLIPImageProcessor, Florence2Config, Florence2ForConditionalGeneration,
                              Florence2Processor)

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<image>", *_byte_symbols()])}
    tokenizer = BartTokenizer(vocab=vocab, merges=[], extra_special_tokens={"image_token": "<image>"})
    side = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    # a 32 px image: strides 4 then 2 leave 4 x 4 patches, plus one pooled token
    images = CLIPImageProcessor(size=side, crop_size=side, do_center_crop=False, image_seq_length=17)
    config = Florence2Config(
        text_config={"model_type": "bart", "vocab_size": len(vocab), "d_model": 32, "encoder_layers": 1,
                     "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                     "encoder_ffn_dim": 37, "decoder_ffn_dim": 37, "max_position_embeddings": 256,
                     "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2},
        vision_config={"depths": [1, 1], "patch_size": [7, 3], "patch_stride": [4, 2], "patch_padding": [3, 1],
                       "patch_prenorm": [False, True], "embed_dim": [16, 32], "num_heads": [2, 2],
                       "num_groups": [2, 2], "window_size": 2, "projection_dim": 32, "max_temporal_embeddings": 4,
                       "max_position_embeddings": 16},
        image_token_id=vocab["<image>"])
    torch.manual_seed(0)
    model = Florence2ForConditionalGeneration(config)
    with torch.no_grad():
        model.get_input_embeddings().weight[vocab["</s>"]] = 0
    model.save_pretrained(folder)
    Florence2Processor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder





def build_tiny_clipseg(folder: Path) -> Path:
    """CLIPSegForImageSegmentation (1-layer CLIP towers, 32 px) + CLIPSegProcessor (a byte-level CLIP tokenizer
    without merges)."""
    import torch
    from transformers import (CLIPSegConfig, CLIPSegForImageSegmentation, CLIPSegProcessor, CLIPTokenizer,
                              ViTImageProcessor)

    folder.mkdir(parents=True, exist_ok=True)
    symbols = _byte_symbols()
    vocab = {t: i for i, t in enumerate([*symbols, *(s + "</w>" for s in symbols), "<|startoftext|>",
                                         "<|endoftext|>"])}
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], pad_token="<|endoftext|>")
    images = ViTImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    tiny = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
    config = CLIPSegConfig(
        text_config={**tiny, "vocab_size": len(vocab), "max_position_embeddings": 77,
                     "bos_token_id": vocab["<|startoftext|>"], "eos_token_id": vocab["<|endoftext|>"],
                     "pad_token_id": vocab["<|endoftext|>"]},
        vision_config={**tiny, "image_size": IMAGE_SIZE, "patch_size": 8}, projection_dim=32, extract_layers=[1],
        reduce_dim=16, decoder_num_attention_heads=2, decoder_intermediate_size=37)
    torch.manual_seed(0)
    CLIPSegForImageSegmentation(config).save_pretrained(folder)
    CLIPSegProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    return folder
# a Llama-3-style chat template (JoyCaption's shape): a header per message, the image where the content names it
LLAMA_CHAT = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
              "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
              "{% if c['type'] == 'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
              "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
              "{% endif %}")


def build_tiny_llava(folder: Path) -> Path:
    """LlavaForConditionalGeneration (JoyCaption's class: a 1-layer CLIP vision tower and a 1-layer Llama) +
    LlavaProcessor (a byte-level tokenizer without merges, a Llama-3-style chat template)."""
    import torch
    from transformers import (CLIPImageProcessor, GPT2Tokenizer, LlavaConfig, LlavaForConditionalGeneration,
                              LlavaProcessor)

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<image>", "<pad>"]
    vocab = {t: i for i, t in enumerate([*specials, *_byte_symbols()])}
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=[], bos_token=specials[0], eos_token="<|eot_id|>",
                              pad_token="<pad>", unk_token="<pad>", extra_special_tokens={"image_token": "<image>"})
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    images = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE,
                                                                               "width": IMAGE_SIZE})
    config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 16, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "intermediate_size": 32, "image_size": IMAGE_SIZE, "patch_size": 8},
        text_config={"model_type": "llama", "vocab_size": len(vocab), "hidden_size": 32, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 37,
                     "max_position_embeddings": 512, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 5},
        image_token_id=vocab["<image>"], vision_feature_select_strategy="full", vision_feature_layer=-1)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    # 32 px in 8 px patches: 16 image tokens, plus CLIP's class token ("full" keeps it)
    LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=8, vision_feature_select_strategy="full",
                   num_additional_image_tokens=1, chat_template=LLAMA_CHAT).save_pretrained(folder)
    return folder


QWEN_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
             "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|>"
             "<|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_qwen2_5_vl(folder: Path) -> Path:
    """Qwen2_5_VLForConditionalGeneration (a 1-block vision tower, 8 px patches merged 2x2, and a 1-layer Qwen2 with
    3-D rotary positions) + its image processor, a byte-level tokenizer with Qwen's vision tokens and a ChatML
    template (chat_template.jinja, as the real model ships it). Saved without Qwen2_5_VLProcessor, whose video
    processor needs torchvision."""
    import torch
    from transformers import GPT2Tokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                "<|video_pad|>"]
    vocab = {t: i for i, t in enumerate([*specials, *_byte_symbols()])}
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=[], eos_token="<|im_end|>", pad_token="<|endoftext|>",
                              unk_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    tokenizer.save_pretrained(folder)
    pixels = IMAGE_SIZE * IMAGE_SIZE
    Qwen2VLImageProcessorPil(min_pixels=pixels, max_pixels=pixels, patch_size=8, merge_size=2,
                             temporal_patch_size=2).save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(QWEN_CHAT, encoding="utf-8")
    config = Qwen2_5_VLConfig(
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "patch_size": 8,
                       "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 16, "out_hidden_size": 32,
                       "fullatt_block_indexes": [0]},
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 512,
                     "bos_token_id": None, "eos_token_id": vocab["<|im_end|>"], "pad_token_id": 0,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}},
        image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"])
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(folder)
    return folder


# the code a BiRefNet-class model ships beside its weights (loaded with trust_remote_code): a list of
# predictions, the last the foreground's logits
BACKGROUND_CODE = """
import torch
from transformers import PreTrainedConfig, PreTrainedModel


class TinyBackgroundConfig(PreTrainedConfig):
    model_type = "tiny_background"


class TinyBackgroundNet(PreTrainedModel):
    config_class = TinyBackgroundConfig

    def __init__(self, config):
        super().__init__(config)
        self.conv = torch.nn.Conv2d(3, 1, 3, padding=1)
        self.post_init()

    def forward(self, pixel_values):
        return [torch.nn.functional.avg_pool2d(pixel_values, 2), self.conv(pixel_values)]
"""


def build_tiny_background(folder: Path) -> Path:
    """A background-removal model as BiRefNet and RMBG-2.0 come: its own code (a 3x3 conv here) and weights, loaded
    through AutoModelForImageSegmentation with trust_remote_code."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_background.py").write_text(BACKGROUND_CODE.lstrip(), encoding="utf-8")
    config = {"model_type": "tiny_background", "architectures": ["TinyBackgroundNet"],
              "auto_map": {"AutoConfig": "tiny_background.TinyBackgroundConfig",
                           "AutoModelForImageSegmentation": "tiny_background.TinyBackgroundNet"}}
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    generator = torch.Generator().manual_seed(0)
    save_file({"conv.weight": torch.randn(1, 3, 3, 3, generator=generator), "conv.bias": torch.zeros(1)},
              str(folder / "model.safetensors"))
    return folder


BUILDERS = {"wd14": build_tiny_tagger, "blip": build_tiny_blip, "florence2": build_tiny_florence2,
            "joycaption": build_tiny_llava, "qwen2_5_vl": build_tiny_qwen2_5_vl, "clipseg": build_tiny_clipseg,
            "background": build_tiny_background}
