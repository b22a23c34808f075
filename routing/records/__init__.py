"""What routing recorded, read back: each Event's route (its RouteRecord, or the failure counted
while it waits), the Events list and its filters, and the sentence that explains a route.

One idea per module: :mod:`~routing.records.selectors` (route records and Events with their
routes), :mod:`~routing.records.filters` (the Events list's filters and their query),
:mod:`~routing.records.explain` (why an Event went where it went, in words)."""
