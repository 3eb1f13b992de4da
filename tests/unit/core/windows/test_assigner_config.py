"""assigner_from_dict: errors name the problem."""

from __future__ import annotations

import pytest

from spark_jobs.core.windows import assigner_from_dict


@pytest.mark.parametrize(("spec", "message"), [
    ({"type": "tumbling"}, "tumbling windows need 'size'"),
    ({"type": "sliding", "size": "1m"}, "sliding windows need 'slide'"),
    ({"type": "session"}, "session windows need 'gap'"),
    ({"type": "hopping", "size": "1m"}, "type must be one of tumbling, sliding, session, global"),
    ({"type": "tumbling", "size": "1 minute"}, "not a duration"),
    ({"type": "tumbling", "size": "1m", "time": "wall"}, "time must be 'event' or 'processing'"),
])
def test_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        assigner_from_dict(spec)
