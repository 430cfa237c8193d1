#!/usr/bin/env python3
"""Regenerates golden.json: every template in templates/ (and the chat template
of ../../../../shared/tokenizer/ggml-vocab-qwen2.gguf) rendered for every
conversation in conversations.json, with and without the generation prompt, by
jinja2 set up as Hugging Face transformers sets it up (sandboxed, trim_blocks,
lstrip_blocks, raise_exception). Run by hand from this directory:

    python3 gen_golden.py
"""
import json
import os
import struct

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL = {  # bos_token, eos_token as the models' tokenizers define them
    "llama2.jinja": ("<s>", "</s>"),
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "chatml.jinja": ("", "<|im_end|>"),
    "qwen2-instruct.jinja": ("", "<|im_end|>"),
    "smollm2.jinja": ("<|im_start|>", "<|im_end|>"),
    "zephyr.jinja": ("<s>", "</s>"),
    "gguf:ggml-vocab-qwen2.gguf": ("", "<|endoftext|>"),
}


def gguf_chat_template(path):
    # The key is followed by its value type (8 = string) and a u64 length.
    data = open(path, "rb").read()
    key = b"tokenizer.chat_template"
    i = data.index(key) + len(key)
    vtype, n = struct.unpack("<IQ", data[i:i + 12])
    assert vtype == 8
    return data[i + 12:i + 12 + n].decode("utf-8")


def raise_exception(message):
    raise TemplateError(message)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    convs = json.load(open("conversations.json"))
    sources = {}
    for name in sorted(os.listdir("templates")):
        sources[name] = open(os.path.join("templates", name), newline="").read()
    sources["gguf:ggml-vocab-qwen2.gguf"] = gguf_chat_template(
        "../../../../shared/tokenizer/ggml-vocab-qwen2.gguf")
    cases = []
    for tname, text in sources.items():
        tmpl = env.from_string(text)
        bos, eos = SPECIAL[tname]
        for cname, msgs in convs.items():
            for gen in (False, True):
                case = {"template": tname, "conversation": cname, "generation": gen}
                try:
                    case["output"] = tmpl.render(messages=msgs, bos_token=bos, eos_token=eos,
                                                 add_generation_prompt=gen)
                except TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    with open("golden.json", "w") as f:
        json.dump({"cases": cases}, f, indent=1, ensure_ascii=True)
        f.write("\n")


if __name__ == "__main__":
    main()
