"""The reproduction of the three papers, on top of the federated-learning core: what the papers claim
(:mod:`.papers`), the verdict rule (:mod:`.rule`: an item's word in :mod:`.rule.item`, a claim's in
:mod:`.rule.claim`), the claims and the evidence each notebook builds (:mod:`.claims`), their figures
(:mod:`.verdict_figures`, :mod:`.plots`), the report (:mod:`.report`), the site (:mod:`.site`), the commands that
regenerate and check everything (:mod:`.reproduce`, :mod:`.verify`, :mod:`.rekey`, :mod:`.prune`, :mod:`.timings`),
the notebooks' helpers (:mod:`.notebook`) and the arena (:mod:`.arena`). The core never imports this folder."""
