/* The entries upload form (factors/forms.py): the data-entry type select offers only the
   chosen module's types, and the example CSV follows the chosen type. Each option carries
   its module and its example (data-module, data-header, data-example), rendered from the
   parser's own schemas; the server refuses a type of another module all the same. */
(function () {
  "use strict";

  function start() {
    var form = document.querySelector("form.upload-form");
    var module = form && form.querySelector('select[name="module_type"]');
    var type = form && form.querySelector('select[name="data_entry_type"]');
    if (!module || !type) return;
    var options = Array.prototype.map.call(type.querySelectorAll("option"),
                                           function (option) { return option.cloneNode(true); });
    var header = document.getElementById("csv-example-header");
    var row = document.getElementById("csv-example-row");

    function showExample() {
      var chosen = type.options[type.selectedIndex];
      if (!chosen || !header || !row) return;
      header.textContent = chosen.dataset.header || "";
      row.textContent = chosen.dataset.example || "";
    }

    // Rebuilt rather than hidden: browsers do not all honour a hidden <option>.
    function offerModuleTypes() {
      var kept = type.value;
      type.replaceChildren();
      options.forEach(function (option) {
        if (option.dataset.module !== module.value) return;
        var copy = option.cloneNode(true);
        copy.selected = copy.value === kept;
        type.appendChild(copy);
      });
      showExample();
    }

    module.addEventListener("change", offerModuleTypes);
    type.addEventListener("change", showExample);
    offerModuleTypes();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
