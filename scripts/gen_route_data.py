#!/usr/bin/env python3
"""Writes data/route/route_train.jsonl: the labelled prompts `tierserve route-train` learns
the gateway router's classifier from (docs/gateway.md, routing).

Two labels, as the router config maps them to models:
  small  requests a small chat model answers well: greetings and small talk, one-fact
         questions, definitions, short rewrites, yes/no and list-a-few questions;
  full   requests that want the full model: multi-step reasoning, analysis and comparison,
         long-form writing, planning, explanations of how or why something works, debugging
         and technical design (the rules catch code, math and translation before the
         classifier sees a request; the classifier covers the long tail).

The prompts are composed from templates and fillers written for this file (no external
data), deterministically (a fixed seed), so the file regenerates byte for byte:

    python3 scripts/gen_route_data.py            # writes data/route/route_train.jsonl
    python3 scripts/gen_route_data.py --check    # exits 1 when the file differs
"""
import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "data", "route", "route_train.jsonl")

PLACES = ["France", "Japan", "Kenya", "Brazil", "Canada", "Norway", "Egypt", "India", "Peru", "Spain", "Vietnam",
          "Australia", "Mexico", "Italy", "Ghana", "Chile"]
THINGS = ["a volcano", "photosynthesis", "a black hole", "inflation", "a vaccine", "a glacier", "democracy", "a rainbow",
          "an earthquake", "a hurricane", "the immune system", "a solar eclipse", "a credit score", "a tide", "erosion",
          "a supply chain", "compound interest", "a neural network", "a heat pump", "a mortgage"]
ANIMALS = ["cat", "dog", "owl", "whale", "fox", "rabbit", "horse", "penguin", "bee", "dolphin", "turtle", "eagle"]
COLORS = ["red", "blue", "green", "yellow", "purple", "orange"]
WORDS = ["happy", "quick", "ancient", "fragile", "generous", "curious", "brave", "quiet", "bright", "honest"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo"]
TOPICS = ["remote work", "electric cars", "social media", "nuclear power", "school uniforms", "city parks",
          "public transport", "online learning", "space exploration", "organic farming", "open source software",
          "a four-day work week", "universal basic income", "urban cycling", "streaming services", "tourism"]
ROLES = ["a small bakery", "a hospital", "a startup", "a public library", "a city council", "a university",
         "a logistics company", "a family farm", "a newspaper", "a charity"]
SYSTEMS = ["a web service", "a mobile app", "a data pipeline", "a payment system", "a search engine", "a chat service",
           "an inventory system", "a booking site"]

SMALL = [
    "Hi!", "Hello there.", "Good morning!", "Hey, how are you?", "Thanks a lot!", "Thank you, that helps.",
    "What's up?", "Nice to meet you.", "Good night!", "See you later.", "How is your day going?", "Bye!",
    "What is the capital of {place}?", "Which continent is {place} in?", "What language do people speak in {place}?",
    "What currency does {place} use?", "Is {place} in Europe?", "Name the capital of {place}.",
    "What is {thing}?", "Define {thing} in one sentence.", "What does the word '{word}' mean?",
    "Give me a synonym for '{word}'.", "What is the opposite of '{word}'?", "Spell '{word}' backwards.",
    "What sound does a {animal} make?", "How many legs does a {animal} have?", "Is a {animal} a mammal?",
    "What color is the sky?", "Name three {color} fruits.", "Name a {color} flower.", "What is your favorite color?",
    "Say hello to {name}.", "Write a one-line greeting for {name}.", "Tell me a short joke.",
    "Tell me a fun fact about a {animal}.", "Give me a random word.", "Suggest a name for a {animal}.",
    "What day comes after Monday?", "How many days are in a week?", "How many months are in a year?",
    "What is the boiling point of water?", "Is the sun a star?", "Which planet is closest to the sun?",
    "Rewrite this more politely: give me the report.", "Make this sentence shorter: I am going to go to the store now.",
    "Fix the spelling: recieve.", "Capitalize this: {name} lives in {place}.", "Is '{word}' an adjective?",
    "Can you recommend a good book?", "What time zone is {place} in?", "Who wrote Romeo and Juliet?",
    "What is the largest ocean?", "List three animals that live in water.", "What do {animal}s eat?",
    "Say thank you in a friendly way.", "Reply with yes or no: is ice cold?", "What is a {animal}?",
    "Give me a nickname for {name}.", "Is it rude to be late?", "What rhymes with '{word}'?",
]

FULL = [
    "Compare the economic and social effects of {topic} and argue which matters more, with evidence.",
    "Write a detailed essay on the long-term consequences of {topic} for cities.",
    "Explain step by step how {thing} works, including the causes and the main stages.",
    "Why does {thing} happen? Walk through the mechanism and common misconceptions in detail.",
    "Analyse the risks and benefits of {topic} for {role}, and recommend a policy with trade-offs.",
    "Draft a five-year strategic plan for {role} facing a shrinking budget; include milestones and risks.",
    "Design the architecture of {system} that must handle a million users: components, data flow and failure modes.",
    "What are the trade-offs between consistency and availability when building {system}? Give concrete scenarios.",
    "Our {system} gets slower every week and memory keeps growing. How would you investigate the root cause?",
    "Summarise the arguments for and against {topic}, then evaluate which side is more convincing and why.",
    "Write a persuasive speech of at least five paragraphs about {topic} for a skeptical audience.",
    "Plan a two-week itinerary across {place} with a budget, transport between cities and cultural background.",
    "Explain the history of {place} from the 19th century to today and how it shaped its current economy.",
    "Critique this business idea for {role}: a subscription service for {topic}. Consider market, costs and competition.",
    "If {name} has to choose between three job offers with different salaries, commutes and growth, how should she decide? Build a decision framework.",
    "Propose an experiment to measure whether {topic} improves wellbeing, including controls and possible biases.",
    "Explain {thing} to a university student, then to a ten-year-old, and compare the two explanations.",
    "Write a short story of about 800 words in which a {animal} solves a mystery, with a twist ending.",
    "What would happen to the world economy if {topic} became universal within a decade? Reason through the second-order effects.",
    "Create a detailed training curriculum for new staff at {role}, week by week, with assessments.",
    "Evaluate three approaches to reducing costs at {role} and estimate their impact with assumptions stated.",
    "Describe how you would migrate {system} to a new database without downtime, step by step.",
    "Write a research proposal on how {thing} affects public health, with methods and expected outcomes.",
    "Discuss the ethical questions raised by {topic} and how different philosophical traditions would answer them.",
    "Outline a negotiation strategy for {role} renegotiating a major supplier contract, with fallback positions.",
    "Explain the causes of {thing} and what the latest research suggests about predicting it.",
    "Give a thorough comparison of {topic} in {place} and in another country, with data you would need to check.",
    "Write a cover letter for {name} applying to lead a team at {role}, tailored to its challenges.",
    "Reason carefully: a train leaves at noon and another an hour later on a longer route; under what conditions does the second arrive first, and why?",
    "Break down the problem of scheduling shifts at {role} with fairness constraints and propose an approach.",
]


def fill(rng, template):
    return template.format(place=rng.choice(PLACES), thing=rng.choice(THINGS), animal=rng.choice(ANIMALS),
                           color=rng.choice(COLORS), word=rng.choice(WORDS), name=rng.choice(NAMES),
                           topic=rng.choice(TOPICS), role=rng.choice(ROLES), system=rng.choice(SYSTEMS))


def generate():
    rng = random.Random(2026)
    seen, rows = set(), []
    for label, templates, n in (("small", SMALL, 330), ("full", FULL, 330)):
        tries = 0
        count = 0
        while count < n and tries < n * 50:
            tries += 1
            text = fill(rng, rng.choice(templates))
            if text in seen:
                continue
            seen.add(text)
            rows.append({"text": text, "label": label})
            count += 1
    rng.shuffle(rows)
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = ap.parse_args()
    text = generate()
    if args.check:
        try:
            same = open(OUT, encoding="utf-8").read() == text
        except OSError:
            same = False
        print("up to date" if same else f"{OUT} differs from the generator")
        sys.exit(0 if same else 1)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT} ({text.count(chr(10))} examples)")


if __name__ == "__main__":
    main()
