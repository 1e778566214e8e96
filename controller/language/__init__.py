"""The principal's language: a request in plain words read into a `Reading` (pure, no I/O).

- `numbers`: money, parallelism and time phrases ("$50", "4 at a time", "under 10 minutes");
- `lexicon`: the catalog's names and the seed's words, as token sequences;
- `choices`: the questions asked instead of guessing;
- `grammar`: `read_request`, a request read into a `Reading` that explains itself.
"""
