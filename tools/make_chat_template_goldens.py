#!/usr/bin/env python3
"""Goldens for the chat templates kvscope renders beyond tools/make_synthetic_checkpoints.py's: Llama 3.1/3.3
(dated system block, default date 26 Jul 2024), Llama 3.2 (the same block dated by strftime_now) and Qwen3
(ChatML with <think> handling and the enable_thinking switch).

The template texts below are written for this project after the structure of the templates Meta and Qwen publish
with Llama-3.1-8B-Instruct, Llama-3.2-1B-Instruct and Qwen3-8B (the tool-calling branches included, so that the
markers kvscope recognises them by are where they are in the originals). Each is rendered and tokenized by
transformers' apply_chat_template with the tokenizer of a synthetic checkpoint (tests/fixtures/hf_synthetic/llama3
for the Llama templates, .../qwen3 for Qwen3; made by make_synthetic_checkpoints.py), for the conversations and
keywords (date_string, enable_thinking, add_generation_prompt) of CASES.

Writes tests/fixtures/chat_templates/<name>.jinja and golden.json. Needs no torch. Regenerate (byte-identical
with the pinned versions of tools/requirements-golden.txt, except "today" of the Llama 3.2 default case):
  /tmp/goldenv/bin/python tools/make_chat_template_goldens.py
"""
import datetime
import json
from pathlib import Path

import jinja2
import tokenizers
import transformers
from transformers import AutoTokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/chat_templates"
SYNTHETIC = ROOT / "tests/fixtures/hf_synthetic"

LLAMA31_TEMPLATE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- The first message, when it is a system message, goes into the system block. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- The system block: always written. #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools go into the first user message. #}
{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Llama 3.2's differs in the default date (today, when transformers provides strftime_now) and has no built-in
# tools.
LLAMA32_TEMPLATE = (LLAMA31_TEMPLATE
                    .replace("""{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}""", """{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}""")
                    .replace("""{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
""", """{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
"""))
assert LLAMA32_TEMPLATE.count("strftime_now") == 2 and "builtin_tools | reject" not in LLAMA32_TEMPLATE

QWEN3_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

SYSTEM_USER = [{"role": "system", "content": "  You answer in one short sentence.\n"},
               {"role": "user", "content": "Where is the lighthouse?"}]
USER_ONLY = [{"role": "user", "content": "  Hello there!\n"}]
MULTI_TURN = [{"role": "user", "content": "Count to 3."}, {"role": "assistant", "content": " 1, 2, 3. "},
              {"role": "user", "content": "And back, café 日本?"}]
# Qwen3: assistant turns with reasoning, before and after the last user query.
THINKING_HISTORY = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Count to 3."},
                    {"role": "assistant", "content": "<think>\nThe user wants numbers.\n</think>\n\n1, 2, 3."},
                    {"role": "user", "content": "And back?"}]
THINKING_LAST = [{"role": "user", "content": "Count to 3."},
                 {"role": "assistant", "content": "<think>\nplan\n</think>\n\n1, 2, 3."},
                 {"role": "user", "content": "And back?"},
                 {"role": "assistant", "content": "\n<think>\n\nreverse it\n\n</think>\n\n\n3, 2, 1."}]
# An assistant turn after the last query that has no reasoning keeps its answer only; one with a stray second
# "</think>" keeps what follows the last.
AFTER_QUERY = [{"role": "user", "content": "Go."},
               {"role": "assistant", "content": "no reasoning here"},
               {"role": "assistant", "content": "<think>a</think>b</think>\nc"},
               {"role": "assistant", "content": "last"}]
# A user message wrapped as a tool response does not count as the last query.
WRAPPED_USER = [{"role": "user", "content": "Go."},
                {"role": "assistant", "content": "<think>\nr1\n</think>\n\nx"},
                {"role": "user", "content": "<tool_response>\n42\n</tool_response>"}]

LLAMA_DATE = "05 Mar 2025"
CASES = {
    "llama3.1": (LLAMA31_TEMPLATE, "llama3", [
        dict(messages=SYSTEM_USER), dict(messages=USER_ONLY), dict(messages=MULTI_TURN),
        dict(messages=SYSTEM_USER, date_string=LLAMA_DATE), dict(messages=USER_ONLY, date_string=LLAMA_DATE),
        dict(messages=MULTI_TURN, date_string=LLAMA_DATE),
        dict(messages=MULTI_TURN + [{"role": "system", "content": " late "}], add_generation_prompt=False),
    ]),
    "llama3.2": (LLAMA32_TEMPLATE, "llama3", [
        dict(messages=SYSTEM_USER, date_string=LLAMA_DATE), dict(messages=USER_ONLY, date_string="29 Feb 2024"),
        dict(messages=MULTI_TURN, date_string=LLAMA_DATE),
        dict(messages=MULTI_TURN),  # today's date, by strftime_now
    ]),
    "qwen3": (QWEN3_TEMPLATE, "qwen3", [
        dict(messages=SYSTEM_USER), dict(messages=USER_ONLY), dict(messages=MULTI_TURN),
        dict(messages=USER_ONLY, enable_thinking=False), dict(messages=MULTI_TURN, enable_thinking=False),
        dict(messages=THINKING_HISTORY), dict(messages=THINKING_HISTORY, enable_thinking=False),
        dict(messages=THINKING_LAST, add_generation_prompt=False),
        dict(messages=AFTER_QUERY, add_generation_prompt=False),
        dict(messages=WRAPPED_USER),
        dict(messages=[{"role": "user", "content": "a"}, {"role": "system", "content": "late system"},
                       {"role": "user", "content": "b"}], enable_thinking=True),
    ]),
}


def render(tokenizer, template, case):
    keywords = {k: case[k] for k in ("date_string", "enable_thinking") if k in case}
    generation = case.get("add_generation_prompt", True)
    text = tokenizer.apply_chat_template(case["messages"], chat_template=template, tokenize=False,
                                         add_generation_prompt=generation, **keywords)
    ids = tokenizer.apply_chat_template(case["messages"], chat_template=template, tokenize=True,
                                        add_generation_prompt=generation, return_dict=True, **keywords)["input_ids"]
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    out = {"messages": case["messages"], "add_generation_prompt": generation, **keywords, "text": text, "ids": ids}
    if "Today Date" in template and "date_string" not in case:
        # What the template wrote for the date: its literal, or strftime_now's today.
        out["date_written"] = text.split("Today Date: ")[1].split("\n")[0]
        if "strftime_now" in template:
            assert out["date_written"] == datetime.datetime.now().strftime("%d %b %Y")
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)  # README.md there is written by hand
    golden = {"schema_version": 1,
              "reference": {"implementation": "transformers apply_chat_template (Jinja2), the synthetic tokenizers",
                            "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                                         "jinja2": jinja2.__version__}},
              "templates": {}}
    for name, (template, checkpoint, cases) in CASES.items():
        (OUT / f"{name}.jinja").write_text(template)
        tokenizer = AutoTokenizer.from_pretrained(SYNTHETIC / checkpoint)
        golden["templates"][name] = {"template": f"{name}.jinja", "checkpoint": checkpoint,
                                     "cases": [render(tokenizer, template, case) for case in cases]}
        print(name, len(cases), "cases")
    (OUT / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
