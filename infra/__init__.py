"""Database and process helpers every app uses: query building, frozen records, lease
transactions, read snapshots, model fields, wake-ups between processes, connection hygiene
between a loop's passes, private files, migration operations, URL converters, the SQLite
backend, the live-update outbox (its one table) and the console's websocket paths, the
registries of plugins named in settings, and the command-line toolkit every management command
uses (``cli``). No app logic: nothing here imports an app."""
