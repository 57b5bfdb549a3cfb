"""The replay experiment: real adversarial rounds played again through the product's
services (``manage.py replay``), their data plans, statistics and reports
(docs/replay.md). It sits outside the product apps and above them: it imports the
leaderboard, annotation, tasks and registry services, and no product module imports
it. It has no models; it is an installed app only so that its two commands
(``replay``, ``replay_tables``) are found."""
