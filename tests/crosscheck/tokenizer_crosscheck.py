"""selq's byte-level BPE tokenizer vs the `tokenizers` PyPI package, token for token.

MODEL is smollm2 (the default) or qwen2.5-coder-1.5b. The reference is
`tokenizers` loading the tokenizer.json that selq builds from the model's GGUF
(vocabulary + merges + the HF pipeline: Sequence[Digits, ByteLevel] for
SmolLM2, Sequence[Split(Qwen2 pattern), ByteLevel] for Qwen); selq encodes the
same texts from the GGUF and from that tokenizer.json. For Qwen a second,
independent reference is the tokenizer transformers builds from the GGUF
itself (its own Qwen2 pattern and added tokens), which checks that selq wrote
the right pipeline, not only that it follows the one it wrote. Texts need
nothing beside the clone: selq's default text (Austen's Emma, from the
r-cran-janeaustenr package scripts/setup.sh installs) whole and line by line,
texts generated here from a fixed seed (GSM8K-style word problems and worked
answers, digit strings, whitespace runs, code, contractions, a dozen scripts,
emoji and unusual spaces), and hand-written edge cases; the team's WikiText-2
and GSM8K files are added when DATA_DIR has them (an optional extra: their
absence is not a failure, under CI=true either). Decoding is checked against both.

Qwen2's own tokenizer.json also has an NFC normalizer, which llama.cpp and
selq do not apply (the GGUF does not record it); the texts are checked to be
NFC already, so that difference cannot hide in the counts.

usage: tokenizer_crosscheck.py DRIVER_EXE DATA_DIR WORKDIR [MODEL]   (DATA_DIR may be absent)
Exit 77 (ctest skip) when a reference is missing locally; under CI=true it fails.
"""
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xref import GGUFS, missing  # noqa: E402

VOCAB = {"smollm2": 49152, "qwen2.5-coder-1.5b": 151936}





try:
    import tokenizers
except ImportError:
    missing("tokenizers (pip install tokenizers)")

EDGE = [
    "", " ", "  ", "\n\n", "a", " a", "a ", "a  b", "a \n b", "\t\tx", "x\t \n", "hello   world  ",
    "don't I'M we'll they're you've she'd it's 'S 'Ll ''s", "a 12 b 345678 c1d2", "3.14159 1,000,000",
    "Ünïcödé façade naïve résumé", "日本語のテキスト、中文文本。", "emoji 😀👍🏽 and ZWJ 👨‍👩‍👧",
    "Ⅻ ½ ² ٣٤ ௰", "x\u00a0y\u2003z\u3000w", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b<|endoftext|><|endoftext|>", "<|im_start", "$$$ !!! ??? ... ---", "  \u2028 x",
    "ctrl \x04\x06 bytes\x1d missing from the vocabulary \x13x\x14",
    "@@ -1,3 +1,4 @@\n def f(x):\n-    return x\n+    return 2*x\n",
]




# Pieces the generated texts are drawn from: several scripts (all in Unicode
# for decades, so that selq's \\p{L}/\\p{N} tables and the reference's regex
# engine agree on them), digits of other systems, and unusual spaces.
WORDS = [
    "the", "The", "of", "and", "a", "to", "in", "is", "was", "I", "it", "for", "on", "you", "he",
    "Emma", "Harriet", "Mr.", "Knightley", "Highbury", "e-mail", "well-known", "U.S.A.", "etc.",
    "café", "naïve", "façade", "Ångström", "Øresund", "Straße", "Ἀθῆναι", "Москва", "Україна",
    "東京", "日本語", "中文", "汉字", "ひらがな", "カタカナ", "한국어", "서울", "العربية", "القاهرة",
    "עברית", "हिन्दी", "नमस्ते", "தமிழ்", "ภาษาไทย", "ქართული", "Ελληνικά", "ﬁne", "ǅemal",
    "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "✓", "→", "∑", "≤", "€", "£", "¥", "©", "™", "°C", "µs",
]
NUMBERS = ["٠١٢٣", "४२", "௰", "Ⅻ", "½", "²³", "１２３", "3.14159", "1,000,000", "2⁸", "0x1F", "1e-9", "-42"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", " \n", "\n ", "\r\n", " \t \n",
          "\u00a0", "\u2003", "\u3000", "\u2009", "\u202f", "\u2028", "    ", "        "]
NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina"]
THINGS = ["clips", "apples", "pages", "cookies", "marbles", "dollars", "eggs", "books", "tickets"]
CODE = [
    "def f(x):\n    return x * 2  # doubles\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if x != None and y >= 10:\n        print(f\"{x!r}: {y:08.3f}\")\n",
    "const s = `${a}+${b}`; // template\n",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;\n",
    "    \n\n    pass\n\t\t# tabs\n",
]
CONTRACTIONS = ["don't", "I'M", "we'll", "they're", "you've", "she'd", "it's", "'S", "'Ll", "O'Brien's",
                "rock 'n' roll", "isn’t", "‘quoted’", "“double”"]


def generated_texts(n=600, seed=33):
    """Texts made here from a fixed seed, so the check needs no data files:
    GSM8K-style problems and worked answers, numbers of every length, runs of
    whitespace, code, contractions and many scripts mixed in one string."""
    rnd = random.Random(seed)
    texts = []
    for _ in range(n // 4):  # word problems and their worked answers, GSM8K's shape
        who, what = rnd.choice(NAMES), rnd.choice(THINGS)
        a, b, c = rnd.randint(2, 999), rnd.randint(2, 99), rnd.randint(2, 12)
        texts.append(f"{who} had {a} {what} on Monday and bought {b} more each day for {c} days. "
                     f"Each costs ${rnd.randint(1, 99)}.{rnd.randint(0, 99):02d}. How many {what} does {who} have now?")
        texts.append(f"{who} bought {b} * {c} = <<{b}*{c}={b * c}>>{b * c} {what}.\n"
                     f"So {who} has {a} + {b * c} = <<{a}+{b * c}={a + b * c}>>{a + b * c} {what}.\n#### {a + b * c}")
    for _ in range(n // 4):  # digit strings: the Digits split and the Qwen pattern's \\p{N}{1,3}
        parts = []
        for _ in range(rnd.randint(1, 8)):
            k = rnd.randint(1, 30)
            parts.append(rnd.choice(["", "x", "v", "$", "-", "(", "#"]) + "".join(rnd.choice("0123456789") for _ in range(k))
                         + rnd.choice(["", "%", "th", "px", ",", ".", ")", "k"]))
        texts.append(rnd.choice(SPACES).join(parts) + rnd.choice(["", " ", rnd.choice(NUMBERS)]))
    pool = WORDS + NUMBERS + CONTRACTIONS
    for _ in range(n // 4):  # mixed scripts and whitespace runs, leading and trailing
        out = [rnd.choice(["", " ", "  ", "\n", "\t"])]
        for _ in range(rnd.randint(1, 25)):
            out.append(rnd.choice(pool))
            out.append(rnd.choice(SPACES) if rnd.random() < 0.5 else rnd.choice([" ", " ", ", ", ". ", "! ", "?\n", "—", "…", "-"]))
        texts.append("".join(out))
    for _ in range(n - 3 * (n // 4)):  # code and punctuation runs
        texts.append("".join(rnd.choice(CODE) for _ in range(rnd.randint(1, 3)))
                     + rnd.choice(["", "!!!", "???", "...", "---", "$$$", "  \n\n  "]))
    # Qwen2's HF tokenizer would NFC-normalize first (see the docstring): keep them NFC.
    return [unicodedata.normalize("NFC", t) for t in texts]


def load_texts(data_dir, driver, work):
    """Austen's Emma (selq's default text, r-cran-janeaustenr), the generated
    texts and the edge cases; WikiText-2 and GSM8K too when DATA_DIR has them."""
    emma = work / "emma.txt"
    subprocess.run([driver, "default-text", str(emma)], check=True)
    whole = emma.read_text(encoding="utf-8")
    gen = generated_texts()
    texts = [whole] + whole.splitlines(keepends=True) + gen + EDGE
    print(f"texts: selq's default text (Emma, {len(whole)} bytes) whole and by line, {len(gen)} generated, "
          f"{len(EDGE)} edge cases")
    wiki = pathlib.Path(data_dir) / "wikitext2-test.txt"
    gsm = pathlib.Path(data_dir) / "gsm8k-test.jsonl"
    if wiki.is_file() and gsm.is_file():
        extra = wiki.read_text(encoding="utf-8")
        texts += [extra] + extra.splitlines(keepends=True)
        for line in gsm.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            texts += [rec["question"], rec["answer"]]
        print(f"and the optional extra data: {wiki}, {gsm}")
    else:
        print(f"(no optional extra data under {data_dir}: WikiText-2 and GSM8K left out)")
    return texts


def run_selq(driver, kind, source, texts_path, work):
    out = work / f"ids_{kind}.json"
    subprocess.run([driver, "encode", kind, str(source), str(texts_path), str(out)], check=True)
    return json.loads(out.read_text(encoding="utf-8"))


def compare(name, texts, ref_ids, ref_dec, got):
    bad = 0
    for i, (t, r, g, rd, gd) in enumerate(zip(texts, ref_ids, got["ids"], ref_dec, got["decoded"])):
        # Bytes without a vocabulary token are dropped by both, so such texts cannot round-trip.
        lossy = any(c in t for c in "\x04\x06\x13\x14\x16\x1d")
        if r != g or gd != rd or (gd != t and not lossy):
            bad += 1
            if bad <= 5:
                k = next((k for k, (a, b) in enumerate(zip(r, g)) if a != b), min(len(r), len(g)))
                print(f"MISMATCH [{name}] text {i} {t[:60]!r}: first difference at token {k}: "
                      f"tokenizers {r[k:k+5]} selq {g[k:k+5]}; decoded equal: {gd == rd}, round trip: {gd == t}")
    rate = got["bytes"] / max(got["seconds"], 1e-9) / 1e6
    print(f"[{name}] {len(texts)} texts, {got['tokens']} tokens, {bad} mismatches; "
          f"selq encode {got['seconds']:.3f} s ({rate:.1f} MB/s)")
    return bad == 0


def transformers_gguf_reference(gguf, texts):
    """The tokenizer transformers builds from the GGUF (its own converter)."""
    try:
        import transformers
    except ImportError:
        missing("transformers (pip install transformers)")
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    backend = tok.backend_tokenizer
    ids = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    print(f"transformers {transformers.__version__} tokenizer from the GGUF: {sum(map(len, ids))} tokens, "
          f"{time.perf_counter() - t0:.1f} s with loading")
    return ids, backend.decode_batch(ids, skip_special_tokens=False)


def main():
    driver, data_dir, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    name = sys.argv[4] if len(sys.argv) > 4 else "smollm2"
    work.mkdir(parents=True, exist_ok=True)
    gguf = GGUFS[name]()
    if not gguf.is_file():
        missing(str(gguf))
    texts = load_texts(data_dir, driver, work)
    not_nfc = sum(1 for t in texts if not unicodedata.is_normalized("NFC", t))
    print(f"texts that NFC would change: {not_nfc}")
    texts_path = work / "texts.json"
    texts_path.write_text(json.dumps(texts), encoding="utf-8")
    tj = work / "tokenizer.json"
    subprocess.run([driver, "write-json", str(gguf), str(tj)], check=True)
    ref = tokenizers.Tokenizer.from_file(str(tj))
    assert ref.get_vocab_size() == VOCAB[name], ref.get_vocab_size()
    t0 = time.perf_counter()
    ref_ids = [e.ids for e in ref.encode_batch(texts, add_special_tokens=True)]
    ref_s = time.perf_counter() - t0
    ref_dec = ref.decode_batch(ref_ids, skip_special_tokens=False)
    print(f"tokenizers {tokenizers.__version__}: {sum(map(len, ref_ids))} tokens in {ref_s:.3f} s (batch, all cores)")
    ok = compare("from GGUF", texts, ref_ids, ref_dec, run_selq(driver, "gguf", gguf, texts_path, work))
    ok = compare("from tokenizer.json", texts, ref_ids, ref_dec,
                 run_selq(driver, "json", tj, texts_path, work)) and ok
    if name != "smollm2":
        # SmolLM2 is left out: transformers builds its GGUF tokenizer without
        # the Digits split (docs/GGUF.md §4, the caveat), so it is no reference there.
        hf_ids, hf_dec = transformers_gguf_reference(gguf, texts)
        ok = compare("transformers from GGUF", texts, hf_ids, hf_dec,
                     run_selq(driver, "gguf", gguf, texts_path, work)) and ok
    if not_nfc and name != "smollm2":
        print(f"FAIL: {not_nfc} texts are not NFC; Qwen2's HF tokenizer would normalize them first")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
