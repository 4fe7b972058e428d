"""No pruning: the LLM sees every visual token (the baseline every method is compared with)."""

from ...method import Acts, Method

METHOD = Method(name="none", help="no pruning", acts=Acts.NEVER)
