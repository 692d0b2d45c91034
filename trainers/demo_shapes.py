"""Flat shapes on plain backgrounds: the demo's images and what its model is taught (no torch)."""
from __future__ import annotations

from PIL import Image, ImageDraw, ImageFilter

DARK_BG, LIGHT_BG = (30, 30, 40), (245, 245, 235)


def draw_shape(shape: str, fill: tuple[int, int, int], background: tuple[int, int, int],
               size: tuple[int, int], box: tuple[int, int, int, int]) -> Image.Image:
    """One flat shape (circle, square, triangle or cross) filling `box` on a plain background."""
    img = Image.new("RGB", size, background)
    draw = ImageDraw.Draw(img)
    left, top, right, bottom = box
    if shape == "triangle":
        draw.polygon([((left + right) // 2, top), (left, bottom), (right, bottom)], fill=fill)
    elif shape == "cross":
        arm = (right - left) // 7
        cx, cy = (left + right) // 2, (top + bottom) // 2
        draw.rectangle((left, cy - arm, right, cy + arm), fill=fill)
        draw.rectangle((cx - arm, top, cx + arm, bottom), fill=fill)
    else:
        (draw.ellipse if shape == "circle" else draw.rectangle)(box, fill=fill)
    return img


def edge_map(image: Image.Image, threshold: int = 40) -> Image.Image:
    """White outlines on black of a flat image's shapes: the kind of control image an edge ControlNet is trained on."""
    edges = image.convert("L").filter(ImageFilter.FIND_EDGES)
    return edges.point(lambda value: 255 if value > threshold else 0).convert("RGB")
