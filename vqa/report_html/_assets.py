"""The page's style and script, inlined once into every report (no file is fetched at view time).

The script renders only the rows of the current page, and draws each of their timelines as an
inline SVG from the downsampled columns (vqa.report_html._data.downsample). Every text from a
record is set with textContent or setAttribute, never parsed as HTML.
"""

STYLE = r"""
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 8px}h2{font-size:15px;margin:16px 0 6px}
.cards{display:flex;flex-wrap:wrap;gap:12px}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px}
table.counts td,table.counts th{padding:1px 8px;text-align:right}table.counts th{text-align:left;font-weight:normal;color:#555}
#controls{position:sticky;top:0;background:#fafafa;padding:6px 0;z-index:2;display:flex;flex-wrap:wrap;gap:8px;align-items:center}
#controls input[type=search]{width:260px}#controls input[type=number]{width:60px}
table#videos{border-collapse:collapse;width:100%;background:#fff}
#videos th{cursor:pointer;background:#eee;text-align:left;padding:4px 6px;position:sticky;top:38px;user-select:none}
#videos th[data-dir=asc]::after{content:" \25B2"}#videos th[data-dir=desc]::after{content:" \25BC"}
#videos td{padding:3px 6px;border-top:1px solid #e4e4e4;vertical-align:top}
#videos td.path span{white-space:pre}#videos td.path{overflow-wrap:break-word;min-width:30ch;max-width:420px;font-family:ui-monospace,monospace;white-space:pre-wrap}
tr.detail td{border-top:none;padding-bottom:10px}
.cat-excellent{color:#1a7f37}.cat-good{color:#4d7c0f}.cat-fair{color:#b45309}.cat-poor{color:#c2410c}.cat-bad{color:#b91c1c}
.error{color:#b91c1c}.warn{color:#92400e;font-size:12px;white-space:pre-wrap;word-break:break-all}
.msg{white-space:pre-wrap;word-break:break-all}
.chip{display:inline-block;border-radius:3px;padding:0 4px;margin:1px;font-size:12px;color:#fff}
svg.timeline{background:#fff;border:1px solid #ddd;display:block}
.thumbs{display:flex;flex-wrap:wrap;gap:8px;margin-top:6px}
figure{margin:0;font-size:11px;max-width:200px}figure img{display:block;border:1px solid #ccc}
.placeholder{width:192px;height:108px;background:#eee;color:#666;display:flex;align-items:center;justify-content:center;text-align:center;font-size:11px;padding:4px;box-sizing:border-box;word-break:break-all}
#pager{margin:8px 0}#pager button{margin:0 4px}
#js-errors{color:#b91c1c;white-space:pre-wrap}
.legend span{margin-right:10px;font-size:12px}
"""

SCRIPT = r"""
(function(){
'use strict';
var errors=document.getElementById('js-errors');
window.addEventListener('error',function(e){errors.textContent+='error: '+e.message+'\n';});
var t0=performance.now();
var DATA=JSON.parse(document.getElementById('vqa-data').textContent);
var ROWS=DATA.rows,COLORS=DATA.colors,PAGE=DATA.page_size;
var SVGNS='http://www.w3.org/2000/svg';
var state={sort:'i',dir:1,page:0,text:'',status:'',category:'',defect:'',min:'',max:''};
// The view is in the address: #status=error&defect=blur&sort=-score&page=2 (and #all: one page).
var SORTS=['i','path','status','score','category','defects','duration_s','resolution','codec','message'];
// A fragment that does not decode (#text=%E0%A4%A) is ignored whole: the default view.
var DEFAULT=JSON.stringify(state);
try{location.hash.slice(1).split('&').forEach(function(kv){var i=kv.indexOf('='),k=i<0?kv:kv.slice(0,i),v=i<0?'':decodeURIComponent(kv.slice(i+1));
  if(k==='all')PAGE=ROWS.length||1;else if(k==='page')state.page=Math.max(0,(parseInt(v,10)||1)-1);
  else if(k==='sort'){var d=v.charAt(0)==='-';v=d?v.slice(1):v;if(SORTS.indexOf(v)>=0){state.sort=v;state.dir=d?-1:1;}}
  else if(['text','status','category','defect','min','max'].indexOf(k)>=0)state[k]=k==='text'?v.toLowerCase():v;});
}catch(e){state=JSON.parse(DEFAULT);PAGE=DATA.page_size;}
function remember(){var parts=[];['text','status','category','defect','min','max'].forEach(function(k){if(state[k]!=='')parts.push(k+'='+encodeURIComponent(state[k]));});
  if(state.sort!=='i'||state.dir<0)parts.push('sort='+(state.dir<0?'-':'')+state.sort);if(state.page)parts.push('page='+(state.page+1));
  if(PAGE===ROWS.length&&PAGE>DATA.page_size)parts.push('all');
  try{history.replaceState(null,'',parts.length?'#'+parts.join('&'):location.pathname);}catch(e){}}
function el(tag,attrs,text){var e=document.createElement(tag);if(attrs)for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!=null)e.textContent=text;return e;}
function sv(tag,attrs,parent){var e=document.createElementNS(SVGNS,tag);for(var k in attrs)e.setAttribute(k,attrs[k]);if(parent)parent.appendChild(e);return e;}
function title(node,text){var t=document.createElementNS(SVGNS,'title');t.textContent=text;node.appendChild(t);}
function clock(s){if(s==null)return '';s=Math.max(0,s);var h=Math.floor(s/3600),m=Math.floor(s%3600/60),x=s%60;
  var ss=(x<10?'0':'')+x.toFixed(s<60?1:0);return h?h+':'+(m<10?'0':'')+m+':'+ss:m+':'+ss;}
function num(x,d){return x==null?'':x.toFixed(d);}
var controls={text:'f-text',status:'f-status',category:'f-category',defect:'f-defect',min:'f-min',max:'f-max'};
function matches(r){
  if(state.text&&r.path.toLowerCase().indexOf(state.text)<0&&(r.error_message||'').toLowerCase().indexOf(state.text)<0)return false;
  if(state.status&&r.status!==state.status)return false;
  if(state.category&&r.category!==state.category)return false;
  if(state.defect&&!r.defects.some(function(d){return d.type===state.defect;}))return false;
  if(state.min!==''&&!(r.score!=null&&r.score>=+state.min))return false;
  if(state.max!==''&&!(r.score!=null&&r.score<=+state.max))return false;
  return true;}
function key(r){var k=state.sort;
  if(k==='defects')return r.defects.length;if(k==='resolution')return r.width==null?null:r.width*r.height;
  if(k==='message')return r.error_code+r.error_message+r.warnings.join();return r[k];}
function sorted(){var list=ROWS.filter(matches),k=state.sort,dir=state.dir;
  list.sort(function(a,b){var x=key(a),y=key(b);if(x==null&&y==null)return a.i-b.i;if(x==null)return 1;if(y==null)return -1;
    if(x<y)return -dir;if(x>y)return dir;return a.i-b.i;});return list;}
function timeline(r){
  var types=[];r.defects.forEach(function(d){if(types.indexOf(d.type)<0)types.push(d.type);});
  // The left margin holds the lanes' labels whole: about 5 px a character at 8 px.
  var longest=types.reduce(function(n,t){return Math.max(n,t.length);},0);
  var W=760,H=150,L=Math.max(34,10+5*longest),R=8,TOP=6,PH=70,tl=r.timeline;
  var lanes=types.length,LANE=9,y0=TOP+PH+18,h=y0+lanes*LANE+14;
  var end=r.duration_s||0;if(tl)end=Math.max(end,tl.t[tl.t.length-1]);r.defects.forEach(function(d){end=Math.max(end,d.end_s);});
  if(!(end>0))end=1;
  var svg=sv('svg',{'class':'timeline',width:W,height:h,viewBox:'0 0 '+W+' '+h,role:'img'});
  title(svg,'timeline of '+r.path);
  function X(t){return L+(W-L-R)*t/end;}function Y(s){return TOP+PH*(1-s/100);}
  [0,20,40,60,80,100].forEach(function(s){sv('line',{x1:L,x2:W-R,y1:Y(s),y2:Y(s),stroke:s%100?'#eee':'#ccc'},svg);
    var t=sv('text',{x:L-4,y:Y(s)+3,'text-anchor':'end','font-size':9,fill:'#888'},svg);t.textContent=s;});
  if(tl){
    var n=tl.t.length,i,pts=[];
    if(tl.black||tl.frozen)for(i=0;i<n;i++){var nx=i+1<n?X(tl.t[i+1]):X(end);
      if(tl.black&&tl.black[i])title(sv('rect',{'class':'flag-black',x:X(tl.t[i]),y:TOP,width:Math.max(1,nx-X(tl.t[i])),height:PH,fill:'#000','fill-opacity':0.18},svg),'black frame at '+clock(tl.t[i]));
      if(tl.frozen&&tl.frozen[i])title(sv('rect',{'class':'flag-frozen',x:X(tl.t[i]),y:TOP,width:Math.max(1,nx-X(tl.t[i])),height:PH,fill:COLORS.frozen,'fill-opacity':0.18},svg),'frozen frame at '+clock(tl.t[i]));}
    if(tl.lo){var band=[];for(i=0;i<n;i++)band.push(X(tl.t[i])+','+Y(tl.hi[i]));for(i=n-1;i>=0;i--)band.push(X(tl.t[i])+','+Y(tl.lo[i]));
      sv('polygon',{'class':'score-range',points:band.join(' '),fill:'#2563eb','fill-opacity':0.15,stroke:'none'},svg);}
    Object.keys(tl.p).forEach(function(k){var q=[];for(i=0;i<n;i++)q.push(X(tl.t[i])+','+Y(100*tl.p[k][i]));
      title(sv('polyline',{'class':'prob',points:q.join(' '),fill:'none',stroke:COLORS[k],'stroke-width':1,'stroke-dasharray':'3 2'},svg),k+' probability (x100)');});
    for(i=0;i<n;i++)pts.push(X(tl.t[i])+','+Y(tl.s[i]));
    title(sv('polyline',{'class':'score',points:pts.join(' '),fill:'none',stroke:'#2563eb','stroke-width':1.5},svg),'score per sampled frame'+(tl.lo?' (bucket mean; band: lowest to highest)':''));
    for(i=0;i<n;i++)sv('line',{'class':'sample',x1:X(tl.t[i]),x2:X(tl.t[i]),y1:TOP+PH+2,y2:TOP+PH+6,stroke:'#555'},svg);
    if(tl.worst)title(sv('circle',{'class':'worst',cx:X(tl.worst.t_s),cy:Y(tl.worst.score),r:3,fill:'#b91c1c'},svg),'worst frame: '+tl.worst.score+' at '+clock(tl.worst.t_s));
  }else{var t=sv('text',{x:L+6,y:TOP+PH/2,'font-size':11,fill:'#888'},svg);t.textContent='no per-frame data: score with --timeline to draw the score over time';}
  types.forEach(function(ty,j){var y=y0+j*LANE;var lab=sv('text',{x:L-4,y:y+7,'text-anchor':'end','font-size':8,fill:'#555'},svg);lab.textContent=ty;
    r.defects.forEach(function(d){if(d.type!==ty)return;
      title(sv('rect',{'class':'defect',x:X(d.start_s),y:y,width:Math.max(1.5,X(d.end_s)-X(d.start_s)),height:LANE-2,fill:COLORS[ty],'fill-opacity':0.3+0.7*d.severity},svg),
        ty+' severity '+d.severity.toFixed(2)+', '+clock(d.start_s)+'\u2013'+clock(d.end_s));});});
  [0,0.25,0.5,0.75,1].forEach(function(f){var t=sv('text',{x:X(end*f),y:h-3,'font-size':9,fill:'#888','text-anchor':f===0?'start':f===1?'end':'middle'},svg);t.textContent=clock(end*f);});
  return svg;}
function thumbs(r){var box=el('div',{'class':'thumbs'});(DATA.thumbs[r.i]||[]).forEach(function(s){var f=el('figure');
  if(s.src){f.appendChild(el('img',{src:s.src,alt:s.label,loading:'lazy'}));}else{f.appendChild(el('div',{'class':'placeholder'},s.problem||'no picture'));}
  f.appendChild(el('figcaption',null,s.label+' @ '+clock(s.t_s)));box.appendChild(f);});return box;}
// A path may wrap after a '/', and inside a name only every 30 characters (not at its '-' or
// spaces): a file name that fits the column's 30 characters is never broken, whatever the
// other columns hold.
function pathCell(tr,path){var td=el('td',{'class':'path'}),parts=path.match(/[^\/]*\/|[^\/]+$/g)||[path];
  parts.forEach(function(part,k){if(k)td.appendChild(el('wbr'));
    for(var j=0;j<part.length;j+=30){if(j)td.appendChild(el('wbr'));td.appendChild(el('span',null,part.slice(j,j+30)));}});
  tr.appendChild(td);return td;}
function cell(tr,text,cls){var td=el('td',cls?{'class':cls}:null,text);tr.appendChild(td);return td;}
function render(){
  var list=sorted(),pages=Math.max(1,Math.ceil(list.length/PAGE));state.page=Math.min(state.page,pages-1);
  var body=document.getElementById('rows'),frag=document.createDocumentFragment();
  list.slice(state.page*PAGE,(state.page+1)*PAGE).forEach(function(r){
    var tr=el('tr',{'class':'row','data-i':r.i});cell(tr,String(r.i+1));pathCell(tr,r.path);
    cell(tr,r.status,r.status==='ok'?'':'error');cell(tr,num(r.score,1));cell(tr,r.category||'',r.category?'cat-'+r.category:'');
    var dc=cell(tr,'');r.defects.forEach(function(d){var c=el('span',{'class':'chip',style:'background:'+COLORS[d.type]},d.type+' '+d.severity.toFixed(2));dc.appendChild(c);});
    cell(tr,r.duration_s==null?'':clock(r.duration_s));cell(tr,r.width==null?'':r.width+'x'+r.height);cell(tr,r.codec);
    var mc=cell(tr,'');if(r.error_code){mc.appendChild(el('div',{'class':'error msg'},r.error_code+': '+r.error_message));}
    r.warnings.forEach(function(w){mc.appendChild(el('div',{'class':'warn'},w));});
    frag.appendChild(tr);
    if(r.status==='ok'||DATA.thumbs[r.i]){var dt=el('tr',{'class':'detail'}),td=el('td',{colspan:10});td.appendChild(timeline(r));td.appendChild(thumbs(r));dt.appendChild(td);frag.appendChild(dt);}
  });
  body.textContent='';body.appendChild(frag);
  document.getElementById('shown').textContent=list.length+' of '+ROWS.length+(ROWS.length===1?' video':' videos')+'; page '+(state.page+1)+' of '+pages;
  document.getElementById('prev').disabled=state.page===0;document.getElementById('next').disabled=state.page>=pages-1;
  document.querySelectorAll('#videos th').forEach(function(th){th.removeAttribute('data-dir');if(th.dataset.key===state.sort)th.setAttribute('data-dir',state.dir>0?'asc':'desc');});
}
Object.keys(controls).forEach(function(k){var c=document.getElementById(controls[k]);c.value=state[k];c.addEventListener('input',function(){state[k]=k==='text'?c.value.toLowerCase():c.value;state.page=0;render();remember();});});
document.querySelectorAll('#videos th').forEach(function(th){th.addEventListener('click',function(){var k=th.dataset.key;state.dir=state.sort===k?-state.dir:1;state.sort=k;render();remember();});});
document.getElementById('prev').addEventListener('click',function(){state.page--;render();remember();window.scrollTo(0,document.getElementById('controls').offsetTop);});
document.getElementById('next').addEventListener('click',function(){state.page++;render();remember();window.scrollTo(0,document.getElementById('controls').offsetTop);});
render();
document.body.setAttribute('data-render-ms',Math.round(performance.now()-t0));
document.body.setAttribute('data-ready','1');
})();
"""
