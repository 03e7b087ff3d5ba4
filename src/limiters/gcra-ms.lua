--@refund
      elseif op == 'r' then
        local iUs, iNs = x2, x3
        local aheadUs = sa - nowUs
        if aheadUs > 0 or (aheadUs == 0 and sb > 0) then
          if units * (iUs + iNs / 1000) > aheadUs + 1 + iUs + 1 then effect = 2
          else
            local thousands = floor(units / 1000)
            local unitsNs = iNs * (units - thousands * 1000)
            local us = sa - (iUs * units + iNs * thousands + floor(unitsNs / 1000))
            local ns = sb - fmod(unitsNs, 1000)
            if ns < 0 then ns = ns + 1000; us = us - 1 end
            if us < nowUs or (us == nowUs and ns == 0) then effect = 2
            else
              effect = 1; na = us; nb = ns
              local r = us - nowUs
              if ns > 0 then r = r + 1 end
              nexp = nowMs + ceil_div(r, 1000)
            end
          end
        end
