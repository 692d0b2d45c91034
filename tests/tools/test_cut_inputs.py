"""A LoRA file cut short (an interrupted download or copy: the header whole, the last tensor's bytes gone) given to a
tool is refused naming the option and saying it is cut short, before anything is read or written."""
from __future__ import annotations

from pathlib import Path

import pytest
from lora_samples import run, sample_modules, write

from trainers.core.errors import ToolError


@pytest.mark.parametrize(("verb", "option", "values"), [
    ("inspect", "file", lambda lora: {"file": str(lora)}),
    ("resize", "lora", lambda lora: {"lora": str(lora), "new_rank": 2, "device": "cpu"}),
    ("convert", "input", lambda lora: {"input": str(lora), "to": "diffusers"}),
])
def test_a_cut_tools_input_is_refused_by_name(tmp_path: Path, verb: str, option: str, values) -> None:
    lora = write(tmp_path / "cut lora.safetensors", sample_modules())
    lora.write_bytes(lora.read_bytes()[:-40])
    before = lora.read_bytes()
    with pytest.raises(ToolError, match=rf"^{option}: {lora} is not a complete \.safetensors file \(is cut short: "
                                        r"its header lists \d+ bytes of tensors, but only \d+ follow it"):
        run(verb, tmp_path / "job", **values(lora))
    assert lora.read_bytes() == before and not list((tmp_path / "job").glob("*.safetensors"))
