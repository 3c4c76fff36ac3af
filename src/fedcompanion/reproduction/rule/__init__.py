"""The verdict rule, declared once: an item's word from its evidence (:mod:`.item`: intervals, sign and threshold
tests), a claim's word from its items (:mod:`.claim`: Holm, equivalence, the paper's own settings, controls, A/A
controls, fragility), and when two stored results are the same but for their last digits (:mod:`.tolerance`)."""
