"""A clip window's sound (trainers/data/clip_audio.py): its own time of the clip's track, resampled, mixed to stereo
as Lightricks' LTX-2 trainer mixes; silent (and said) for a clip without an audio stream."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from sound_clips import window, write_sound_clip

from trainers.data.clip_audio import ClipSound, read_sound, to_channels, window_sound


def test_a_window_reads_its_own_time_of_the_clips_sound(tmp_path: Path) -> None:
    clip = write_sound_clip(tmp_path / "late.mp4", 24, channels=1, silent_until=0.5)
    sound = ClipSound(16000, 24.0)
    early, present = window_sound(window(clip, tuple(range(9))), sound)  # 0 to 0.375 s: silent
    late, _ = window_sound(window(clip, tuple(range(13, 22))), sound)  # 0.54 to 0.92 s: the tone
    assert present and early.shape == late.shape == (2, sound.samples(9)) == (2, 6000)
    assert np.abs(early).max() < 0.02 and np.abs(late[:, 200:-200]).mean() > 0.25
    assert np.array_equal(late[0], late[1])  # mono doubled to stereo
    # past the track's end: silence
    assert np.abs(read_sound(clip, 0.9, 4000, 16000)[:, 2000:]).max() < 1e-6


def test_clips_without_sound_and_images_are_silent_and_say_so(tmp_path: Path) -> None:
    import dataclasses

    from trainers.data.clip_audio import has_sound

    quiet = write_sound_clip(tmp_path / "quiet.mp4", 9, sound=False)
    wave, present = window_sound(window(quiet, tuple(range(9))), ClipSound(16000, 24.0))
    assert not has_sound(quiet) and not present and not wave.any() and wave.shape == (2, 6000)
    loud = write_sound_clip(tmp_path / "loud.mp4", 9)
    image = dataclasses.replace(window(loud, (0,)), is_image=True)  # an image: one frame, no sound
    wave, present = window_sound(image, ClipSound(16000, 24.0))
    assert has_sound(loud) and not present and wave.shape == (2, 666) and not wave.any()


def test_surround_is_mixed_to_stereo_as_lightricks_trainer_mixes_it() -> None:
    wave = np.eye(6, dtype=np.float32)  # one impulse per channel: FL FR FC LFE BL BR
    mixed = to_channels(wave, 2)
    main, side = 1 / 2.414, 0.707 / 2.414
    assert np.allclose(mixed, [[main, 0, side, 0, side, 0], [0, main, side, 0, 0, side]], atol=1e-4)
    assert np.allclose(to_channels(np.ones((3, 4), np.float32), 2), 1.0)
