"""Make servectl's image/OCR corpus: PNG and JPEG images of text, tables, digits and receipts, and its manifest.

    python3 scripts/make_ocr_corpus.py [--out src/servectl/bench/qualify/corpus/ocr]

Needs Pillow (a build-time tool only: servectl reads the committed files, never this script). Each image is
drawn with Pillow's bundled font, so that the output does not depend on the fonts of the machine. The
manifest pins every file by SHA-256 (the gate refuses a changed file) and lists the strings an answer must
contain. Each image also carries its text in its metadata (a PNG ``tEXt`` chunk / a JPEG comment, key
``servectl-ocr``): the stand-in engine "reads" images from there, so that the gate can pass and fail on it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, PngImagePlugin

OUT = Path(__file__).resolve().parents[1] / "src" / "servectl" / "bench" / "qualify" / "corpus" / "ocr"
PROMPT = "Transcribe all the text in this image, keeping numbers exactly as written."
TABLE_PROMPT = "Read this table and write out every row with all of its cells."
RECEIPT_PROMPT = "Read this receipt: list each item with its price, and give the total."
METADATA_KEY = "servectl-ocr"


@dataclass(frozen=True)
class Item:
    """One image: its file name, kind, the lines or table rows drawn, and the strings an answer must contain."""

    file: str
    kind: str
    lines: tuple[str, ...]
    expect: tuple[str, ...]
    prompt: str = PROMPT
    table: bool = False


ITEMS: tuple[Item, ...] = (
    Item(
        "text-pangram.png", "text", ("The quick brown fox", "jumps over the lazy dog."), ("quick brown fox", "lazy dog")
    ),
    Item("text-sign.jpg", "text", ("EXIT 14B", "Gate closes at 06:45"), ("exit 14b", "06:45")),
    Item(
        "text-paragraph.png",
        "text",
        ("Qualification proves that a", "service works for its clients,", "not only that it is fast."),
        ("service works for its clients", "not only that it is fast"),
    ),
    Item("text-warning.jpg", "text", ("WARNING", "HIGH VOLTAGE - KEEP OUT"), ("warning", "high voltage", "keep out")),
    Item(
        "text-command.png",
        "text",
        ("$ servectl qualify demo", "  --suite full --out evidence"),
        ("servectl qualify demo", "suite full"),
    ),
    Item("digits-serial.png", "digits", ("Serial number", "SN 4815-1623-42"), ("4815 1623 42",)),
    Item("digits-phone.jpg", "digits", ("Call us:", "+1 (555) 013-2048"), ("555", "013 2048")),
    Item("digits-invoice.png", "digits", ("Invoice No. 2026-00917", "Due 2026-03-31"), ("2026 00917", "2026 03 31")),
    Item(
        "table-prices.png",
        "table",
        ("Item|Qty|Price", "Apples|3|1.20", "Bread|1|2.50", "Milk|2|0.99"),
        ("apples", "bread", "milk", "1 20", "2 50", "0 99"),
        prompt=TABLE_PROMPT,
        table=True,
    ),
    Item(
        "table-schedule.jpg",
        "table",
        ("Day|Room|Time", "Monday|B12|09:30", "Wednesday|A04|14:00", "Friday|C7|11:15"),
        ("monday", "b12", "09 30", "wednesday", "a04", "14 00", "friday", "11 15"),
        prompt=TABLE_PROMPT,
        table=True,
    ),
    Item(
        "table-scores.png",
        "table",
        ("Team|Won|Lost", "Herons|12|3", "Otters|9|6", "Lynxes|4|11"),
        ("herons", "otters", "lynxes", "12", "11"),
        prompt=TABLE_PROMPT,
        table=True,
    ),
    Item(
        "receipt-cafe.png",
        "receipt",
        ("CAFE LUMEN", "12 Harbour Road", "--------------------", "Espresso      2.80", "Croissant     3.10",
         "Orange juice  4.50", "--------------------", "TOTAL        10.40", "Thank you!"),
        ("cafe lumen", "espresso", "croissant", "10 40"),
        prompt=RECEIPT_PROMPT,
    ),
    Item(
        "receipt-hardware.jpg",
        "receipt",
        ("NORDIC HARDWARE", "Receipt #88213", "--------------------", "Hammer       19.95", "Screws x100   6.20",
         "Wood glue     8.40", "--------------------", "TOTAL        34.55", "Paid by card"),
        ("nordic hardware", "88213", "hammer", "34 55"),
        prompt=RECEIPT_PROMPT,
    ),
)  # fmt: skip


def draw(item: Item) -> Image.Image:
    """The image of ``item``: dark text on a light background (a grid for tables)."""
    font = ImageFont.load_default(size=30)
    if item.table:
        rows = [line.split("|") for line in item.lines]
        widths = [max(int(font.getlength(r[c])) for r in rows) + 40 for c in range(len(rows[0]))]
        height = 56
        image = Image.new("RGB", (sum(widths) + 40, height * len(rows) + 40), "white")
        pen = ImageDraw.Draw(image)
        for r, row in enumerate(rows):
            x = 20
            for c, cell in enumerate(row):
                box = (x, 20 + r * height, x + widths[c], 20 + (r + 1) * height)
                pen.rectangle(box, outline="black", width=2, fill="#dde" if r == 0 else None)
                pen.text((x + 20, 20 + r * height + 12), cell, fill="black", font=font)
                x += widths[c]
        return image
    width = max(int(font.getlength(line)) for line in item.lines) + 80
    background = "#f4f1e8" if item.kind == "receipt" else "white"
    image = Image.new("RGB", (width, 50 * len(item.lines) + 60), background)
    pen = ImageDraw.Draw(image)
    for i, line in enumerate(item.lines):
        pen.text((40, 30 + 50 * i), line, fill="#111", font=font)
    return image


def encode(item: Item) -> bytes:
    """The file's bytes, with the drawn text in its metadata (for the stand-in engine)."""
    image = draw(item)
    text = "\n".join(" | ".join(line.split("|")) for line in item.lines)
    out = io.BytesIO()
    if item.file.endswith(".png"):
        info = PngImagePlugin.PngInfo()
        info.add_text(METADATA_KEY, text)
        image.save(out, format="PNG", pnginfo=info, optimize=True)
    else:
        image.save(out, format="JPEG", quality=85, comment=f"{METADATA_KEY}:{text}".encode())
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for item in ITEMS:
        data = encode(item)
        (out / item.file).write_bytes(data)
        entries.append(
            {
                "file": item.file,
                "kind": item.kind,
                "sha256": hashlib.sha256(data).hexdigest(),
                "prompt": item.prompt,
                "expect": list(item.expect),
            }
        )
    manifest = {
        "name": "servectl-ocr",
        "version": 1,
        "generator": "scripts/make_ocr_corpus.py",
        "match": "normalized containment: NFKC, case-folded, every run of other than letters and digits is one space",
        "items": entries,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"{len(entries)} images and manifest.json in {out}")


if __name__ == "__main__":
    main()
