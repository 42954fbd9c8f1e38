"""``runledger serve``: the store's JSON API, live viewer deltas over SSE and a viewer page."""
