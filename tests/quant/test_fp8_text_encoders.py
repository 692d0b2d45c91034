"""text_encoder_precision = 'fp8' on the T5 family (FLUX.1's and SD3's T5-XXL, Wan's UMT5, HunyuanVideo's ByT5): the
encoder still encodes, close to its bf16/fp32 output (T5 ties its `shared` embedding to `encoder.embed_tokens`)."""
from __future__ import annotations

import pytest
import torch
from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

from trainers.quant.apply import quantize_frozen


@pytest.mark.parametrize("model_class, config_class", [(T5EncoderModel, T5Config), (UMT5EncoderModel, UMT5Config)])
def test_an_fp8_t5_encoder_encodes_close_to_its_full_precision_output(model_class, config_class) -> None:
    torch.manual_seed(0)
    encoder = model_class(config_class(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                       num_heads=4)).eval()
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    with torch.no_grad():
        before = encoder(ids).last_hidden_state
        quantize_frozen(encoder, "fp8", torch.float32, torch.device("cpu"))
        after = encoder(ids).last_hidden_state
    stored = {p.dtype for p in encoder.parameters()}
    assert torch.float8_e4m3fn in stored  # its linear layers are stored in 8 bits
    assert torch.nn.functional.cosine_similarity(before.flatten(), after.flatten(), dim=0) > 0.99
