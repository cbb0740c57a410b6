"""Task markers, minitorch-style: `pytest exercises -m task3` runs the check of exercise 3 (if/else),
`pytest exercises -m warmup` the warm-ups."""
import checks


def pytest_configure(config):
    for stem, (marker, what) in checks.TASKS.items():
        config.addinivalue_line("markers", f"{marker}: {what} ({stem}.py)")
