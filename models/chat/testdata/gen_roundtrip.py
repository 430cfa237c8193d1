#!/usr/bin/env python3
"""Regenerates roundtrip.json: a tool round trip (tools, a user question, the
assistant's tool call, the tool's result) rendered through every shared
template that takes tools or tool calls (../../../../shared/chat/templates),
by jinja2 set up as transformers' apply_chat_template sets it up. Run by hand
from this directory:

    python3 gen_roundtrip.py
"""
import json
import os
from datetime import datetime

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SHARED = os.path.join("..", "..", "..", "..", "shared", "chat")
NOW = "2026-12-01T09:30:00Z"


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def env_for(now):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    return env


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}]

# What an OpenAI request becomes: arguments turned into an object, a null
# content into "" (Qwen3's template cannot take None).
MESSAGES = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call12345", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}", "tool_call_id": "call12345"},
]

SPECIAL = {
    "meta-llama": ("<|begin_of_text|>", "<|eot_id|>"),
    "NousResearch": ("<|begin_of_text|>", "<|im_end|>"),
    "Qwen": ("", "<|im_end|>"),
    "mistralai": ("<s>", "</s>"),
    "openai": ("<|startoftext|>", "<|return|>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "ibm": ("<|end_of_text|>", "<|end_of_text|>"),
    "HuggingFaceTB": ("<|im_start|>", "<|im_end|>"),
}


def main():
    now = datetime.strptime(NOW, "%Y-%m-%dT%H:%M:%SZ")
    cases = []
    for name in sorted(os.listdir(os.path.join(SHARED, "templates"))):
        src = open(os.path.join(SHARED, "templates", name), newline="").read()
        if "tool_calls" not in src:
            continue
        bos, eos = next(v for k, v in SPECIAL.items() if name.startswith(k))
        tmpl = env_for(now).from_string(src)
        case = {"template": name, "bos_token": bos, "eos_token": eos}
        try:
            case["text"] = tmpl.render(messages=MESSAGES, tools=TOOLS, documents=None,
                                       add_generation_prompt=True, bos_token=bos, eos_token=eos)
        except TemplateError as e:
            case["error"] = str(e)
        cases.append(case)
    out = {"now": NOW, "tools": TOOLS, "messages": MESSAGES, "cases": cases}
    with open("roundtrip.json", "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
