"""LTX-2 runs with_audio (slow: each trains the tiny model of the real diffusers classes in process): a 2-step LoRA
from a clip with a sound track, one without and an image trains the audio stream's LoRA, names the clip without
sound and the image, renders its sample with sound, and a run resumed from its step-1 state ends with the
uninterrupted run's weights; the same with the latents (and the audio latents) cached."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from family_checks import clip_lora_runs
from sound_clips import write_sound_clip

from trainers.models.ltx2.tiny import build_tiny_ltx2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx2") / "model")


def sound_dataset(tmp: Path) -> Path:
    """A 9-frame clip with a sound track, one without, and an image (windows of 9 frames: 1 + 8k)."""
    from PIL import Image

    clips = tmp / "clips"
    clips.mkdir(parents=True)
    write_sound_clip(clips / "drum.mp4", 9)
    write_sound_clip(clips / "quiet.mp4", 9, sound=False, caption="a quiet clip")
    Image.new("RGB", (64, 64), (200, 40, 40)).save(clips / "red.png")
    (clips / "red.txt").write_text("a red square")
    config = tmp / "dataset.toml"
    config.write_text(f'[general]\nresolution = [64, 64]\nbatch_size = 1\n\n[[datasets]]\nvideo_directory = '
                      f'"{clips}"\ntarget_frames = [9]\n')
    return config


@pytest.fixture(scope="module", params=[False, True], ids=["decoded", "cached"])
def audio_runs(request: pytest.FixtureRequest, tiny: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> SimpleNamespace:
    tmp = tmp_path_factory.mktemp("ltx2-audio")
    return clip_lora_runs(tiny, tmp, sound_dataset(tmp / "data"), sample_side=64, discrete_flow_shift=4.7,
                          with_audio=True, cache_latents=request.param)


@pytest.mark.slow
def test_a_lora_with_audio_trains_the_audio_stream_and_names_what_has_no_sound(audio_runs: SimpleNamespace) -> None:
    import av
    from helpers import events

    evs = events(audio_runs.run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    warnings = [e["message"] for e in evs if e["type"] == "warning"]
    assert any("quiet.mp4 has no audio stream" in w for w in warnings), warnings
    assert any("1 image(s) train as 1-frame clips without sound" in w for w in warnings), warnings
    assert not any("drum.mp4" in w for w in warnings)
    sample = Path(next(e for e in evs if e["type"] == "sample")["path"])
    with av.open(str(sample)) as container:  # the sample has its sound: the audio latents decoded and vocoded
        assert len(list(container.decode(container.streams.video[0]))) == 25
        sound = container.streams.audio[0]
        assert sound.rate == 16000 and sound.channels == 2  # the tiny vocoder's rate, stereo
        container.seek(0)
        samples = sum(frame.samples for frame in container.decode(sound))
        # the tiny vocoder upsamples its ~100 mel frames 4x (the published one 240x, 24 kHz): one AAC frame
        assert samples >= 4 * 100
    audio = {k: v for k, v in audio_runs.lora.items() if "audio" in k and k.endswith("lora_up.weight")}
    assert len(audio) == 2 * 18  # each block's audio stream and audio-video attention linears
    assert all(v.abs().sum() > 0 for v in audio.values())  # they start at zero: each moved


@pytest.mark.slow
def test_a_resumed_lora_with_audio_equals_the_uninterrupted_one(audio_runs: SimpleNamespace) -> None:
    assert audio_runs.lora.keys() == audio_runs.resumed.keys()
    assert max((audio_runs.lora[k] - audio_runs.resumed[k]).abs().max().item() for k in audio_runs.lora) < 1e-6


@pytest.mark.slow
def test_the_saved_audio_lora_loads_with_every_key_in_comfyui_and_ltx2pipeline(
        tiny: Path, audio_runs: SimpleNamespace) -> None:
    from test_ltx2 import loaded_in_comfyui_and_ltx2pipeline

    assert loaded_in_comfyui_and_ltx2pipeline(tiny, audio_runs.file) == ([], 2 * 28, 2 * 28)
