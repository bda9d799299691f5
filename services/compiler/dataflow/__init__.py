"""Where each value a run used came from: the data-flow half of the compiler.

For a string in a step's input (or the run's answer) the question is what produced it:
  constant   the task prompt, the model's own earlier input, or a stable choice of how
             (a selector, a URL, a UI label): replayed as recorded;
  template   an earlier step's output, found by exact string match against list items
             and object fields (or embedded in a longer string: a relative href behind a
             constant origin, extracted headlines inside an answer): becomes references;
             text several items hold ("Operational"), or a short word an item holds
             ("OK"), reads the item its neighbouring references read ("Web app:
             Operational"), else it is a judgement;
  judgement  content that changes between runs, picked or rewritten in a way no rule
             expresses: the small model decides again on replay.

What the model wrote before a call (`model_text`, thinking) is never consulted: "Let me
open the page" is not reasoning about data.

One idea per module:
  text        words and numbers in any script, whole-word matching, numbering marks
  prompt      what the task prompt asks: a judgement, a verdict, positions, counts
  sources     the terms: earlier outputs, pointers, templates, provenance, records
  templates   a value found in earlier outputs, exactly or as text around them
  urls        references inside a URL's parts, links resolved against a page
  urlparts    a URL's path segments and query parts, and their percent-decoding
  leaks       page content left in the text around references
  choices     values the prompt names as one option the page decides between
  provenance  one value's classification: constant, template or judgement
  binding     which item a reference reads when several items hold its text
  answer      the run's answer: a verdict on what the run read is a judgement
  picks       items picked out of a list: by position, by a pick, or a judgement
"""
