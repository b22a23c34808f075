"""The per-process map of values read last (infra.kept)."""

from infra.kept import KeptPerProcess


def test_kept_loads_once_per_key_and_forgets_the_oldest_beyond_its_size():
    loads = []
    kept = KeptPerProcess(2)

    def loader(key):
        def load():
            loads.append(key)
            return key.upper()

        return load

    assert kept.get("a", loader("a")) == "A"
    assert kept.get("a", loader("a")) == "A"
    kept.get("b", loader("b"))
    kept.get("a", loader("a"))  # "a" is now the newest
    kept.get("c", loader("c"))  # "b" goes
    kept.get("a", loader("a"))
    kept.get("b", loader("b"))
    assert loads == ["a", "b", "c", "b"]
    assert len(kept) == 2


def test_kept_clear_forgets_every_value():
    kept = KeptPerProcess(4)
    kept.get(1, lambda: "one")
    kept.clear()
    assert kept.get(1, lambda: "again") == "again"
