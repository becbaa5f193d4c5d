"""The staffed shop with a short deadline, for the end-to-end tests of expiry (`--app tests.review_app:app`).

Every refund and cancellation goes to `support` with a deadline of `$REVIEW_APP_EXPIRES_SECONDS`
(2 s unless set), then is rejected.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

from agent import ApprovalReview, ChatApp, Review
from agent.demo import ShopDeps, staffed_shop_app


def app() -> ChatApp[ShopDeps]:
    seconds = float(os.environ.get("REVIEW_APP_EXPIRES_SECONDS", "2"))

    def review(call: ApprovalReview) -> Review:
        return Review(by="support", expires_after=timedelta(seconds=seconds))

    return dataclasses.replace(staffed_shop_app(), review=review, reviewer_roles=("support",))
