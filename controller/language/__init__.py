"""The principal's language: requests and questions in plain words, read (pure, no I/O).

- `grammar`: `read_request`, a request read into a `Reading` that explains itself, in steps:
  `asides` (normalising, what is said besides the request), `typos`, `numbers` (money,
  parallelism, time), `walk` (words into groups of names), `selection` and `families`
  (what the groups select, or what to ask: `ask`);
- `lexicon` and `words`: the catalog's names and the principal's own words;
- `choices`: the questions asked instead of guessing;
- `questions`: a question about runs told from a request, read into a kind and a subject.
"""
