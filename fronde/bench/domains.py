"""The atlas's prompt set: ten cognitive domains, five prompts each, written for Fronde.

Like the battery, every prompt is completion-style, because the CPU profile's
model (gemma-3-270m) is a base model: a prompt opens a document the model goes on
writing. The domains follow the speculative-decoding-lab's question (where does
speculation pay?), from copy-heavy work, where n-gram drafts should be accepted
(code edits, summaries that quote, answers lifted from a given context), to free
generation, where nothing in the context predicts the next tokens (prose, chat,
multilingual text).

A prompt that gives its own stop string ends there (the close of a fence, the
next speaker's turn), so an answer is not padded with whatever the base model
would write next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["DOMAINS", "DOMAIN_PROMPTS", "Domain", "DomainPrompt", "prompts_by_domain"]

Domain = Literal[
    "code-generation",
    "code-editing",
    "math",
    "structured-json",
    "english-prose",
    "multilingual-prose",
    "summarization",
    "context-qa",
    "chat",
    "step-by-step",
]

DOMAINS: tuple[Domain, ...] = get_args(Domain)
"""The ten domains, in table order (copy-heavy ones are spread, not grouped)."""


@dataclass(frozen=True)
class DomainPrompt:
    """One atlas prompt.

    Attributes:
        name: unique key in records (``<domain>-<n>``).
        domain: one of :data:`DOMAINS`.
        prompt: the completion-style text sent as ``prompt``.
        stop: a stop string, or None.
    """

    name: str
    domain: Domain
    prompt: str
    stop: str | None = None


_FENCE = "\n```\n"

# --- code generation: a signature and a docstring, the body to write ---------------------

_CODE_GEN = (
    '''```python
def parse_duration(text: str) -> float:
    """Parse "1h30m", "45s" or "2m5s" into seconds.

    Raises ValueError on an unknown unit or an empty string.
    """
''',
    '''```python
class LRUCache:
    """A least-recently-used cache with a fixed capacity.

    get(key) returns the value or None; put(key, value) evicts the oldest entry
    when the cache is full.
    """

    def __init__(self, capacity: int) -> None:
''',
    """```javascript
// Debounce: call fn only after `wait` ms have passed without another call.
// Returns the wrapped function; wrapped.cancel() drops a pending call.
function debounce(fn, wait) {
""",
    """```rust
/// Split `text` into words and count each one, ignoring case.
/// Returns the counts sorted by count, then by word.
pub fn word_counts(text: &str) -> Vec<(String, usize)> {
""",
    """```sql
-- Tables: customers(id, name, country), orders(id, customer_id, total, placed_at).
-- For each country, the number of customers who placed at least one order in 2025
-- and the total they spent, largest total first.
SELECT
""",
)

# --- code editing: a file, the change asked for, then the file again ---------------------

_SHOP = """def total(cart, prices):
    result = 0
    for item, count in cart.items():
        result += prices[item] * count
    return result


def apply_discount(amount, percent):
    return amount - amount * percent / 100


def receipt(cart, prices):
    lines = []
    for item, count in cart.items():
        lines.append(f"{item} x{count}: {prices[item] * count:.2f}")
    lines.append(f"total: {total(cart, prices):.2f}")
    return "\\n".join(lines)
"""

_CONFIG_PY = """import os


def load_config():
    host = os.environ.get("APP_HOST", "localhost")
    port = int(os.environ.get("APP_PORT", "8080"))
    debug = os.environ.get("APP_DEBUG", "0") == "1"
    workers = int(os.environ.get("APP_WORKERS", "4"))
    return {"host": host, "port": port, "debug": debug, "workers": workers}


def describe(config):
    mode = "debug" if config["debug"] else "production"
    return f"{config['host']}:{config['port']} ({mode}, {config['workers']} workers)"
"""

_TODO_JS = """export function addTodo(list, title) {
  return [...list, { title, done: false }];
}

export function toggle(list, index) {
  return list.map((t, i) => (i === index ? { ...t, done: !t.done } : t));
}

export function remaining(list) {
  return list.filter((t) => !t.done).length;
}
"""


def _edit(language: str, path: str, source: str, ask: str) -> str:
    return (
        f"File `{path}`:\n\n```{language}\n{source}```\n\n"
        f"Change: {ask} Everything else stays exactly as it was.\n\n"
        f"The whole file `{path}` after the change:\n\n```{language}\n"
    )


_CODE_EDIT = (
    _edit("python", "shop.py", _SHOP, "rename the function `total` to `subtotal`."),
    _edit("python", "shop.py", _SHOP, "add type hints to every function."),
    _edit(
        "python",
        "config.py",
        _CONFIG_PY,
        "read the variables with the prefix `SVC_` instead of `APP_`.",
    ),
    _edit("javascript", "todo.js", _TODO_JS, "add a function `clearDone(list)`."),
    _edit(
        "python",
        "config.py",
        _CONFIG_PY,
        "raise ValueError when the port is not between 1 and 65535.",
    ),
)

# --- math: worked problems in a textbook's layout -------------------------------------------

_MATH = (
    "Problem 1. Solve 3x + 7 = 22.\nSolution. Subtract 7 from both sides: 3x = 15. "
    "Divide by 3: x = 5.\n\nProblem 2. Solve 5x - 4 = 2x + 11.\nSolution.",
    "Exercise: compute the derivative of f(x) = x^3 sin(x).\n\nBy the product rule, f'(x) =",
    "A train leaves at 9:40 and travels 210 km at 84 km/h. When does it arrive?\n\n"
    "Time taken = distance / speed =",
    "Theorem. The sum of the first n odd numbers is n^2.\n\nProof by induction.",
    "Table of squares and cubes.\n\nn | n^2 | n^3\n1 | 1 | 1\n2 | 4 | 8\n3 | 9 | 27\n",
)

# --- structured output: JSON that follows a shown schema or record --------------------------

_JSON = (
    "Convert the list to JSON.\n\nList:\n- Ada Lovelace, born 1815, London\n"
    "- Alan Turing, born 1912, London\n- Grace Hopper, born 1906, New York\n"
    "- Edsger Dijkstra, born 1930, Rotterdam\n\nJSON:\n```json\n[\n"
    '  {"name": "Ada Lovelace", "born": 1815, "city": "London"},\n',
    "An OpenAPI fragment for a `GET /books/{id}` endpoint:\n\n```json\n{\n"
    '  "paths": {\n    "/books/{id}": {\n      "get": {\n',
    'package.json for a small TypeScript CLI named "tally":\n\n```json\n{\n',
    "Weather observations as JSON Lines, one per hour:\n\n```jsonl\n"
    '{"time": "2026-03-01T00:00Z", "temp_c": 4.1, "wind_kmh": 12, "sky": "clear"}\n'
    '{"time": "2026-03-01T01:00Z", "temp_c": 3.8, "wind_kmh": 10, "sky": "clear"}\n',
    'The same order as JSON.\n\nOrder 1182 by Mina Park: 2 "Blue mug" at 9.50, '
    '1 "Tea sampler" at 14.00, shipping 4.90, paid by card.\n\n```json\n{\n'
    '  "order_id": 1182,\n',
)

# --- English prose: openings of essays, stories and articles --------------------------------

_PROSE_EN = (
    "The lighthouse keeper had not spoken to anyone in eleven days when the boat appeared",
    "Why cities plant trees\n\nA street with trees is cooler in summer, and",
    "Chapter 3. The Winter Market\n\nSnow had fallen on the square overnight, and",
    "Letter to a younger colleague\n\nDear Sam,\n\nYou asked me what I wish I had known "
    "in my first year of teaching.",
    "How bread rises\n\nYeast is a living fungus. When it is mixed with flour and water,",
)

# --- multilingual prose: the same kind of openings in other languages ----------------------

_PROSE_MULTI = (
    "Le village se réveillait lentement. Sur la place, le boulanger",
    "Der Zug hatte schon zwanzig Minuten Verspätung, als die Durchsage kam:",
    "La historia de la imprenta comienza mucho antes de Gutenberg. En China,",
    "Il mercato del sabato mattina è il cuore del quartiere. Tra i banchi",
    "O rio corria devagar entre as montanhas, e na margem esquerda",
)

# --- summarization: an article, then a summary that may quote it ---------------------------

_ARTICLE_1 = (
    "The town council voted on Tuesday to close Harbor Street to cars on weekends from "
    "May to September. Shops on the street had asked for the change for two years, "
    "saying that foot traffic doubles when the street is open only to pedestrians. "
    "Residents of the side streets worried about parking; the council answered that the "
    "car park behind the library will be free on weekends during the trial. The trial "
    "will be reviewed in October, when the council will look at shop sales, complaints "
    "and the number of visitors counted by the tourist office."
)
_ARTICLE_2 = (
    "Researchers at the coastal station counted 1,240 nesting sea turtles this season, "
    "up from 860 last year. They credit a ban on beach lighting near the nesting sites, "
    "introduced in 2024, and volunteer patrols that move eggs laid below the high-tide "
    "line. The station warns that one good season is not a trend: turtle counts swing "
    "widely from year to year, and the station will need five more years of data before "
    "it can say whether the population is recovering."
)
_ARTICLE_3 = (
    "Version 4.2 of the editor adds a command palette, opened with Ctrl+Shift+P, that "
    "lists every command with its shortcut. Plugins can now register their own palette "
    "entries. The release also fixes a crash when opening files larger than 2 GB, and "
    "speeds up search in large folders by indexing file names in the background. "
    "Settings from version 4.1 are migrated automatically on first start."
)

_SUMMARIZE = (
    f"Article:\n{_ARTICLE_1}\n\nSummary in two sentences:",
    f"Article:\n{_ARTICLE_2}\n\nSummary in two sentences:",
    f"Release notes:\n{_ARTICLE_3}\n\nSummary as a bulleted list:\n-",
    f"Article:\n{_ARTICLE_1}\n\nKey facts, quoted from the article:\n1.",
    f"Article:\n{_ARTICLE_2}\n\nHeadline and one-paragraph summary:\n\nHeadline:",
)

# --- question answering over a given context ------------------------------------------------

_QA = (
    f"Context:\n{_ARTICLE_1}\n\nQuestion: When will the trial be reviewed, and what will "
    "the council look at?\nAnswer:",
    f"Context:\n{_ARTICLE_2}\n\nQuestion: Why does the station say one good season is not "
    "a trend?\nAnswer:",
    f"Context:\n{_ARTICLE_3}\n\nQuestion: How do you open the command palette, and what "
    "can plugins do with it?\nAnswer:",
    f"Context:\n```python\n{_CONFIG_PY}```\n\nQuestion: Which environment variables does "
    "load_config read, and what are their defaults?\nAnswer:",
    f"Context:\n{_ARTICLE_1}\n\nQuestion: Where can residents park on weekends during the "
    "trial?\nAnswer:",
)

# --- chat: a transcript, the assistant's next turn ------------------------------------------

_CHAT = (
    "User: Hi! Can you suggest a name for my new bakery?\nAssistant:",
    "User: I have chicken, rice and spinach. What can I cook tonight?\nAssistant:",
    "User: My tomato plants have yellow leaves at the bottom. Should I worry?\nAssistant:",
    "User: Explain what a VPN does, in simple words.\nAssistant:",
    "User: I keep putting off my tax return. Any tips to get started?\nAssistant:",
)

# --- step-by-step reasoning: a question, then "Let's think step by step" --------------------

_STEPS = (
    "Q: A shop sells pens at 3 for 2 euros. How much do 12 pens cost?\n"
    "A: Let's think step by step.",
    "Q: Anna is older than Ben. Ben is older than Carl. Is Carl older than Anna?\n"
    "A: Let's think step by step.",
    "Q: A tank holds 600 liters and fills at 25 liters per minute while leaking 5 liters "
    "per minute. How long until it is full?\nA: Let's think step by step.",
    "Q: If today is Wednesday, what day will it be in 100 days?\nA: Let's think step by step.",
    "Q: Three friends split a bill of 87 euros, and one of them pays 9 euros more than each "
    "of the others. How much does each pay?\nA: Let's think step by step.",
)


def _make(domain: Domain, prompts: tuple[str, ...], stop: str | None) -> list[DomainPrompt]:
    return [DomainPrompt(f"{domain}-{i + 1}", domain, p, stop) for i, p in enumerate(prompts)]


DOMAIN_PROMPTS: tuple[DomainPrompt, ...] = (
    *_make("code-generation", _CODE_GEN, _FENCE),
    *_make("code-editing", _CODE_EDIT, _FENCE),
    *_make("math", _MATH, None),
    *_make("structured-json", _JSON, _FENCE),
    *_make("english-prose", _PROSE_EN, None),
    *_make("multilingual-prose", _PROSE_MULTI, None),
    *_make("summarization", _SUMMARIZE, "\n\n\n"),
    *_make("context-qa", _QA, "\nQuestion:"),
    *_make("chat", _CHAT, "\nUser:"),
    *_make("step-by-step", _STEPS, "\nQ:"),
)
"""All 50 prompts, five per domain, in :data:`DOMAINS` order."""


def prompts_by_domain(
    domains: tuple[str, ...] = (), per_domain: int | None = None
) -> list[DomainPrompt]:
    """The prompts of ``domains`` (all when empty), the first ``per_domain`` of each.

    Raises:
        ValueError: a domain that is not in :data:`DOMAINS`.
    """
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown:
        raise ValueError(f"unknown domain {unknown[0]!r}; known: {', '.join(DOMAINS)}")
    chosen: list[DomainPrompt] = []
    for d in domains or DOMAINS:
        chosen += [p for p in DOMAIN_PROMPTS if p.domain == d][:per_domain]
    return chosen
