"""The small synthetic corpus the CPU demos' targets and drafts are trained on.

Word problems with a step-by-step answer. The questions are the smoke test's default prompts
(configs/prompts/gsm8k-style.jsonl, copied here as `PROMPTS` so that an edit there does not change
the demos; a test keeps the two equal) with their numbers and names drawn again for every copy; the answers follow one skeleton that
reuses the question's numbers. Pure Python, reproducible from a seed; every character is ASCII
below 126, so the demos' character tokenizer (token id = code point) reads it all.

The text has what makes a speculative draft's acceptance fall with its position, as on real text:
the skeleton's words follow from the words before them, the unit an answer counts in follows from
the question (far back in the context), while the numbers are drawn at random (the target can only
guess them, and a draft has to guess what the target will guess). The further a draft position
lies from the anchor, the more likely a hard token lies in between.
"""

from __future__ import annotations

import random
import re

PROMPTS = (
    "A bakery sells muffins for $3 each and cookies for $1.50 each. Maria buys 4 muffins and 6 "
    "cookies. How much does she spend in total? Explain your reasoning step by step.",
    "A train travels 180 kilometers in 2 hours and then 150 kilometers in 3 hours. What is its "
    "average speed for the whole trip? Show your work.",
    "Tom has 3 times as many marbles as Jerry. Together they have 64 marbles. How many marbles does "
    "each of them have? Solve it step by step.",
    "A rectangular garden is 12 meters long and 7 meters wide. A path 1 meter wide runs around the "
    "outside of the garden. What is the area of the path? Explain each step.",
    "A shop discounts a jacket by 20 percent, and then takes another 10 percent off the discounted "
    "price. The jacket originally cost $150. What is the final price? Show the calculation.",
    "Sara reads 25 pages on Monday, and each following day she reads 5 more pages than the day "
    "before. How many pages has she read in total after Friday? Work it out step by step.",
    "A tank holds 500 liters of water. It leaks 12 liters per hour while a pump adds 20 liters per "
    "hour. Starting with 180 liters, how many hours until the tank is full? Explain your answer.",
    "Three friends share the cost of a $96 dinner. Alex pays twice as much as Ben, and Ben pays $8 "
    "more than Chris. How much does each person pay? Solve step by step.",
    "A school has 480 students. 35 percent of them take the bus, 25 percent walk, and the rest are "
    "driven by their parents. How many students are driven? Show your reasoning.",
    "A farmer plants 15 rows of corn with 24 plants in each row. Each plant produces 3 ears of corn, "
    "and he sells them in bags of 12. How many full bags can he sell? Explain each step.",
    "A car uses 6 liters of fuel per 100 kilometers. Fuel costs $1.80 per liter. How much does the "
    "fuel cost for a 450 kilometer trip? Show your work step by step.",
    "Lena saves $15 every week. Her brother starts with $60 and saves $10 every week. After how many "
    "weeks will they have saved the same amount? Work it out carefully.",
    "A recipe needs 250 grams of flour for 10 pancakes. How much flour is needed for 34 pancakes, and "
    "how many full 1 kilogram bags must be bought? Explain step by step.",
    "The sum of three consecutive even numbers is 138. What are the numbers? Show how you find them.",
    "A cinema has 18 rows with 22 seats each. For one show, 5 rows are completely empty and the other "
    "rows are three quarters full. How many people are watching? Explain your reasoning.",
    "A cyclist rides uphill at 12 kilometers per hour for 30 minutes and then downhill at 30 "
    "kilometers per hour for 20 minutes. How far does she ride in total? Show each step.",
)
# Each prompt is a question and a closing request ("Show your work."); the corpus pairs every
# question with any of the closings.
QUESTIONS = tuple(prompt[: prompt.rindex("?") + 1] for prompt in PROMPTS)
CLOSINGS = tuple(sorted({prompt[prompt.rindex("?") + 2 :] for prompt in PROMPTS}))
# What each question's answer counts (PROMPTS' order): the answer names it after every number it
# computes, so a draft has to know which question it is answering, which only the target's
# hidden states of the context tell it.
UNITS = (
    "dollars", "kilometers", "marbles", "square meters", "dollars", "pages", "liters", "dollars",
    "students", "bags", "dollars", "weeks", "grams", "even numbers", "people", "kilometers",
)  # fmt: skip
NAMES = (
    "Maria",
    "Tom",
    "Jerry",
    "Sara",
    "Alex",
    "Ben",
    "Chris",
    "Lena",
    "Anna",
    "Omar",
    "Nora",
    "Liam",
    "Emma",
    "Noah",
)
NUMBER = re.compile(r"\d+(?:\.\d+)?")
NAME = re.compile(r"\b(" + "|".join(NAMES) + r")\b")


def _draw_number(rng: random.Random, old: str) -> str:
    whole, _, fraction = old.partition(".")
    digits = len(whole)
    value = str(rng.randint(1 if digits == 1 else 10 ** (digits - 1), 10**digits - 1))
    return value + ("." + "".join(rng.choice("0123456789") for _ in fraction) if fraction else "")


def _problem(rng: random.Random) -> str:
    names = dict(zip(NAMES, rng.sample(NAMES, len(NAMES)), strict=True))
    index = rng.randrange(len(QUESTIONS))
    unit = UNITS[index]
    question = NAME.sub(lambda m: names[m.group(0)], QUESTIONS[index])
    question = NUMBER.sub(lambda m: _draw_number(rng, m.group(0)), question)
    numbers = [int(float(n)) for n in NUMBER.findall(question)][:3]
    while len(numbers) < 3:
        numbers.append(rng.randint(2, 9))
    a, b, c = numbers
    first = rng.choice(("x", "+"))
    value = a * b if first == "x" else a + b
    second = rng.choice(("+", "-"))
    result = value + c if second == "+" else value - c
    answer = (
        f"Step 1: The numbers are {a}, {b} and {c}. Step 2: {a} {first} {b} = {value} {unit}. "
        f"Step 3: {value} {second} {c} = {result} {unit}. The answer is {result} {unit}."
    )
    return f"{question} {rng.choice(CLOSINGS)}\n{answer}\n"


def problems(count: int, seed: int) -> list[str]:
    """`count` problems with their answers, each ending in a newline; the same list for the same seed."""
    rng = random.Random(seed)
    return [_problem(rng) for _ in range(count)]


def corpus_text(count: int, seed: int) -> str:
    return "".join(problems(count, seed))


def question_prompts(count: int, seed: int) -> list[str]:
    """The questions alone, up to the closing request (no newline): prompts for the demo target."""
    return [problem.split("\n", 1)[0] for problem in problems(count, seed)]
