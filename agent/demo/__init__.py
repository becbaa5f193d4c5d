"""The demo shop: an example app served through the same seam as any user's (`ChatApp`).

Its agent, tools, offline demo model, feedback sub-agent, business tables, migrations and seed
data all live here; no core module imports this package.
"""

from __future__ import annotations

from .app import DELAY_VARIABLE, INSTRUCTIONS, STARTER_PROMPTS, TEXTS, build_agent, shop_app
from .business import Account, BusinessData, CancelOutcome, FaqAnswer, Order, RefundOutcome, money
from .feedback import Feedback, analyze_feedback, feedback_agent, feedback_model
from .model import DEFAULT_ORDER_ID, DEMO_MODEL_NAME, demo_model, user_messages
from .staffed import staffed_shop_app
from .tools import TOOLS, ShopDeps

__all__ = (
    "DEFAULT_ORDER_ID",
    "DELAY_VARIABLE",
    "DEMO_MODEL_NAME",
    "INSTRUCTIONS",
    "STARTER_PROMPTS",
    "TEXTS",
    "TOOLS",
    "Account",
    "BusinessData",
    "CancelOutcome",
    "FaqAnswer",
    "Feedback",
    "Order",
    "RefundOutcome",
    "ShopDeps",
    "analyze_feedback",
    "build_agent",
    "demo_model",
    "feedback_agent",
    "feedback_model",
    "money",
    "shop_app",
    "staffed_shop_app",
    "user_messages",
)
