"""The backends that run a schedule: one step loop (``loop``) on real tensors (``tensor``) or
on integers (``counting``), and closed forms for one request (``closed_form``); the hidden-state
sources (``source``) and the roofline time ESTIMATES (``timing``)."""
