"""What the agents layer drives: the sub-agents' definitions (``definitions``) and the ``Agent`` tool (``tool``)."""
