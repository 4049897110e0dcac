"""AZR-style prompts for teachers (proposers) and students (solvers), in two generation modes.

* `free_form` follows AZR: R1-style system paragraph, raw `User: ...\nAssistant: <think>` text, the
  model writes `<think>...</think><answer>...</answer>` with fenced blocks inside the answer.
* `scaffolded` (default, for small models) uses the tokenizer's chat template and *prefills* the
  assistant turn with the opening code fence, stopping at the closing fence, step by step
  (program, then input; or one code_f input after another, then the message). The model only
  writes the contents of each block, which a 135M model can do and a free-form answer it cannot.

A prompt is a `Plan`: the prompt text plus a list of `Step(prefill, stop)`; `populora.lm.sampling`
executes plans in mixed-adapter batches. Pure functions, no model here.
"""

from __future__ import annotations

from populora.tasks.plans import FENCE, Plan, Step
from populora.tasks.tasks import code_f_split

R1_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>."
)

CODE_REQUIREMENTS = """### Code Requirements:
- Name the entry function `f` (e.g., `def f(...): ...`); nested definitions and helper classes are allowed, defined at the top
- Ensure the function returns a value and takes at least one parameter
- Make it deterministic; it should need multi-step state tracking to reason about
- AVOID randomness, date/time, I/O, printing, and external state (forbidden modules: {banned})
- It must finish in under 1 second
"""


# Where a scaffolded block ends besides its closing fence. A program ends where top-level code that
# is not part of it starts (a second `def f(`, a call or print of f, an assert): a 135M model goes on
# writing "usage examples" until it runs out of tokens, which AZR counts as a format failure. An
# input is one line: the model writes `f(...)` calls or prose on the lines after a good input.
PROGRAM_STOPS = (FENCE, "\ndef f(", "\nf(", "\nprint(", "\nassert ")
INPUT_STOPS = (FENCE, "\n")

SHORT_BLOCK_TOKENS = (
    32  # one input or message: a 135M model rambles on if not cut; each decode step costs ~0.1 s on CPU
)


def _reference_block(index: int, ref: dict) -> str:
    return (
        f"<snippet_{index}>\n```python\n{ref['program']}\n```\n"
        f"```input\n{ref['inputs'][0]}\n```\n```output\n{ref['outputs'][0]}\n```\n</snippet_{index}>\n"
    )


# AZR's formatting example. Free-form mode keeps it; scaffolded mode leaves it out, because a small
# model copies it verbatim (a two-argument signature with a list input, or `[3, 1, 2]` whatever the
# signature). Measured on SmolLM2-135M, code_o + code_i at generation 0, 24 proposals
# (perf/proposer_validity.py): 3/16 valid with it (fence-only stops), 14/24 without (PROGRAM_STOPS).
AZR_IO_EXAMPLE = (
    "def f(name: str, info: dict):\n    # code logic here\n    return result",
    "'John', {'age': 20, 'city': 'New York'}",
)


def proposer_io_prompt(
    task_type: str, references: list[dict], banned: list[str], example: tuple[str, str] | None = AZR_IO_EXAMPLE
) -> str:
    """AZR's code_i / code_o proposer prompt (with AZR's swapped difficulty sentence fixed)."""
    hard = "your input from the output" if task_type == "code_i" else "the output from your input"
    refs = "".join(_reference_block(i, ref) for i, ref in enumerate(references))
    return (
        "## Task: Create a New Python Code Snippet (where custom classes are allowed, defined at the top) "
        f"and One Matching Input, such that it is hard to deduce {hard}.\n\n"
        + CODE_REQUIREMENTS.format(banned=", ".join(banned))
        + "\n### Input Requirements:\n- Provide exactly one input for the function\n"
        "- Separate multiple arguments with commas; quote strings\n\n"
        "### Formatting:\n- Format your code with:\n```python\ndef f(...):\n    # your code here\n    return ...\n```\n"
        "- Format your input with:\n```input\narg1, arg2, ...\n```\n\n"
        + (f"### Example Format:\n```python\n{example[0]}\n```\n\n```input\n{example[1]}\n```\n\n" if example else "")
        + "### Evaluation Criteria:\n- Executability: the code runs without errors\n"
        f"- Difficulty: predicting {hard} needs reasoning\n- Creativity: differs from the reference snippets\n\n"
        + (f"### Reference Code Snippets:\n{refs}" if refs else "")
    )


def proposer_f_prompt(program: str, n_inputs: int, known_inputs: list[str] | None = None) -> str:
    """AZR's code_f proposer prompt: inputs for an existing program plus a message.

    The formatting example shows inputs known to work for *this* program (from its buffer task)
    instead of AZR's fixed `'John', {'age': 20}`, which small models copy whatever f's arity.
    """
    examples = (known_inputs or ["'John', {'age': 20}", "'Sammy', {'age': 37}"])[:2]
    blocks = "".join(f"```input\n{example}\n```\n" for example in examples)
    return (
        f"## Task: Output {n_inputs} Inputs that can be plugged into the following Code Snippet to produce "
        "diverse Outputs, and give a message related to the given snippet.\n\n"
        "### Input Requirements:\n"
        f"- Provide {n_inputs} valid inputs for the code snippet, each wrapped in its own ```input block\n"
        "- Separate multiple arguments with commas; quote strings\n\n"
        "### Message Requirements:\n- Leave a message (hint, question or instruction) in a ```message block "
        "that helps someone deduce the function from inputs and outputs; do not put the code in it\n\n"
        f"### Formatting:\n{blocks}"
        "```message\nWrite a function that ...\n```\n\n"
        f"### Code Snippet:\n```python\n{program}\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)\n```\n"
    )


def _example(task_type: str, ex: dict) -> str:
    if task_type == "code_o":
        return f"```python\n{ex['program']}\n```\n```input\n{ex['inputs'][0]}\n```\nAnswer:\n```output\n{ex['outputs'][0]}\n```\n"
    if task_type == "code_i":
        return f"```python\n{ex['program']}\n```\n```output\n{ex['outputs'][0]}\n```\nAnswer:\n```input\n{ex['inputs'][0]}\n```\n"
    return _pairs_block(ex) + f"Answer:\n```python\n{ex['program']}\n```\n"


def _pairs_block(task: dict) -> str:
    shown = len(code_f_split(task["inputs"])[0])
    pairs = "".join(
        f"```input_{i}\n{task['inputs'][i]}\n```\n```output_{i}\n{task['outputs'][i]}\n```\n" for i in range(shown)
    )
    return f"# Input and Output Pairs:\n{pairs}# Message:\n```message\n{task.get('message') or ''}\n```\n"


def solver_prompt(task: dict, examples: list[dict]) -> str:
    """AZR's solver prompts (code_o deduce output, code_i provide an input, code_f write f)."""
    task_type = task["type"]
    worked = "".join(f"# Worked example {i + 1}:\n{_example(task_type, ex)}\n" for i, ex in enumerate(examples))
    if task_type == "code_o":
        head = (
            "# Task: Deduce the Output of the Code Snippet for the given Input.\n"
            "Give the output as a Python literal in a ```output block (quote strings; use a tuple for several values).\n\n"
        )
        body = f"# Code Snippet:\n```python\n{task['program']}\n```\n# Input:\n```input\n{task['inputs'][0]}\n```\n"
    elif task_type == "code_i":
        head = (
            "# Task: Provide One Possible Input of the Code Snippet that produces the given Output.\n"
            "Give the input in a ```input block as `arg1, arg2, ...` (quote strings).\n\n"
        )
        body = f"# Code Snippet:\n```python\n{task['program']}\n```\n# Output:\n```output\n{task['outputs'][0]}\n```\n"
    else:
        head = (
            "# Task: Deduce the Function that Produced the Outputs from the Inputs.\n"
            "Write it in a ```python block and name the entry function `f`.\n\n"
        )
        body = _pairs_block(task)
    return head + worked + "# Now your turn:\n" + body


ANSWER_FENCE = {"code_o": "output", "code_i": "input", "code_f": "python"}


def scaffolded_plan(prompt: str, steps: list[Step], chat_template) -> Plan:
    """Wrap `prompt` in the chat template (user turn + open assistant turn)."""
    return Plan(prompt=chat_template(prompt), steps=tuple(steps))


def free_form_plan(prompt: str) -> Plan:
    """AZR's raw format: no chat template, the assistant turn opens with <think>."""
    return Plan(prompt=f"{R1_SYSTEM}\nUser: \n{prompt}\nAssistant: ", steps=(Step("<think>", None),))


def proposer_steps(task_type: str, n_inputs: int) -> list[Step]:
    if task_type == "code_f":
        # One step per input, so exactly n_inputs blocks come out: given one open block, a 135M
        # model writes one multi-line block and moves on (measured: 0/4 valid code_f at gen 0).
        # The code_f prompt is short (~240 tokens), so re-reading it per step is affordable.
        # Blocks must not be empty: after one empty block the model repeats empty blocks (measured:
        # 8/8 code_f proposals with an empty message, most with 9 empty inputs, at generation 0).
        first = [Step(f"{FENCE}input\n", stop=INPUT_STOPS, max_tokens=SHORT_BLOCK_TOKENS, non_empty=True)]
        more = [
            Step(f"{FENCE}\n{FENCE}input\n", stop=INPUT_STOPS, max_tokens=SHORT_BLOCK_TOKENS, non_empty=True)
            for _ in range(n_inputs - 1)
        ]
        # The message is free text: if the model does not close its block, what it wrote is kept.
        return (
            first
            + more
            + [Step(f"{FENCE}\n{FENCE}message\n", max_tokens=SHORT_BLOCK_TOKENS, must_stop=False, non_empty=True)]
        )
    return [
        Step(f"{FENCE}python\ndef f(", stop=PROGRAM_STOPS),
        Step(f"{FENCE}\n{FENCE}input\n", stop=INPUT_STOPS, max_tokens=SHORT_BLOCK_TOKENS, non_empty=True),
    ]


def solver_steps(task_type: str) -> list[Step]:
    prefill = f"{FENCE}python\ndef f(" if task_type == "code_f" else f"{FENCE}{ANSWER_FENCE[task_type]}\n"
    return [Step(prefill)]


def free_form_suffix(task_type: str, role: str) -> str:
    """Format reminder for free-form mode (AZR asks for fenced blocks inside <answer>)."""
    if role == "propose" and task_type == "code_f":
        return "\nPut every ```input block and the ```message block inside <answer> </answer>."
    if role == "propose":
        return "\nPut the ```python block and the ```input block inside <answer> </answer>."
    return f"\nPut your final ```{ANSWER_FENCE[task_type]} block inside <answer> </answer>."


def chat_wrapper(tokenizer):
    """`prompt -> text` in the tokenizer's chat format (a plain User/Assistant frame without one)."""

    def chat(prompt: str) -> str:
        if tokenizer.chat_template is None:
            return f"User: {prompt}\nAssistant: "
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )

    return chat
